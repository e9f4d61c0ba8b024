package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// Every command that connects lists the credential and TLS flags (and
// their environment variables) in its --help.
func TestConnectingCommandsListCredentialFlags(t *testing.T) {
	for _, cmd := range []string{"processor", "agent", "toolexec", "gate", "send", "answer", "events", "chat", "bench", "gateway"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "--help"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, stderr.String())
		}
		help := strings.Join(strings.Fields(stdout.String()), " ")
		for _, want := range []string{"--nats-creds=FILE", "$PARLEY_NATS_CREDS", "--nats-nkey=FILE", "$PARLEY_NATS_NKEY",
			"--tls-ca=FILE", "$PARLEY_TLS_CA", "--tls-cert=FILE", "$PARLEY_TLS_CERT", "--tls-key=FILE", "$PARLEY_TLS_KEY"} {
			if !strings.Contains(help, want) {
				t.Errorf("parley %s --help does not list %s", cmd, want)
			}
		}
	}
}

// A password (or token) in --nats is never printed: not in errors, not in
// logs, whatever the command.
func TestNATSPasswordNeverPrinted(t *testing.T) {
	for _, args := range [][]string{
		{"send", "-t", "t1", "--publish-timeout", "1s", "hi"},
		{"answer", "-t", "t1", "-e", "x", "--publish-timeout", "1s", "cancel"},
		{"events", "-t", "t1"},
		{"chat", "-t", "t1"},
		{"processor", "--startup-timeout", "1s", "--log-level", "debug"},
		{"gate", "--startup-timeout", "1s", "--log-level", "debug"},
		{"bench", "--smoke"},
	} {
		for _, url := range []string{"nats://bob:s3cret@127.0.0.1:1", "nats://s3cret@127.0.0.1:1", "nats://127.0.0.1:1,nats://bob:s3cret@127.0.0.1:2"} {
			var stdout, stderr bytes.Buffer
			code := run(append(args, "--nats", url), strings.NewReader(""), &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code == 0 {
				t.Errorf("%s: exit 0 with no server", args[0])
			}
			if strings.Contains(out, "s3cret") || strings.Contains(out, "bob") {
				t.Errorf("parley %s --nats %s printed the credentials:\n%s", args[0], url, out)
			}
		}
	}
}

// startDevCmd runs `parley dev` (no gateway) in dataDir until the test
// ends, and returns its NATS URL.
func startDevCmd(t *testing.T, dataDir string) string {
	url, _ := startDevCmdGateway(t, dataDir, "off")
	return url
}

// startDevCmdGateway is startDevCmd with the gateway on gatewayListen
// ("off": none); it also returns dev's output so far.
func startDevCmdGateway(t *testing.T, dataDir, gatewayListen string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	e := &env{Globals: &Globals{LogLevel: "warn", LogFormat: "text"}, ctx: ctx, stdout: out, stderr: out}
	c := &devCmd{DataDir: dataDir, Listen: "127.0.0.1:0", Gateway: gatewayListen,
		storeFlags:     storeFlags{Storage: "file", Replicas: 1, StartupTimeout: 30 * time.Second, PublishRetry: time.Second},
		processorFlags: processorFlags{PauseTTL: time.Minute, Concurrency: 2},
		agentFlags:     agentFlags{PreExecuteTimeout: 2 * time.Second}}
	go func() { done <- c.Run(e) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("dev: %v", err)
		}
		if t.Failed() {
			t.Logf("dev output:\n%s", out.String())
		}
	})
	re := regexp.MustCompile(`NATS with JetStream on (nats://\S+) `)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil && (gatewayListen == "off" || strings.Contains(out.String(), "Gateway token")) {
			return m[1], out
		}
		select {
		case err := <-done:
			t.Fatalf("dev exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parley dev is secure by default: it writes one seed per principal
// (0600) at first start and reuses them, refuses anonymous clients, and
// the integrator commands find integrator.nk in the data dir.
func TestDevSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	url := startDevCmd(t, dir)
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("parley dev accepted an anonymous client")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous client: %v, want an authorization violation", err)
	}
	authDir := filepath.Join(dir, "auth")
	for _, p := range natsauth.Roles() {
		fi, err := os.Stat(filepath.Join(authDir, natsauth.SeedFile(p.Name)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", fi.Name(), fi.Mode().Perm())
		}
	}

	// send, answer, events and chat use the data dir's integrator seed
	// when given no credentials.
	t.Setenv("PARLEY_DATA_DIR", dir)
	var f natsAuthFlags
	c := f.integratorCredentials()
	if c.NKeyFile != filepath.Join(authDir, "integrator.nk") || c.Principal != natsauth.Integrator {
		t.Fatalf("integrator credentials = %+v", c)
	}
	nc, err := natsauth.Connect(url, "test", c, nil)
	if err != nil {
		t.Fatalf("integrator: %v", err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Reading PARLEY_CHAT (created by dev's workers) is allowed.
	if _, err := client.New(b, "").Watch(ctx, client.WatchOptions{Thread: "t1", FromStart: true}); err != nil {
		t.Fatalf("integrator watching a thread: %v", err)
	}

	// A whole turn from the command line, as README shows it: send (with
	// no credential flags) publishes as integrator, the workers each on
	// their own principal run it, the verdict comes back.
	waitToolsRegistered(t, adminJS(t, url, dir))
	var stdout, stderr bytes.Buffer
	code := run([]string{"send", "--nats", url, "-t", "t1", "--wait", "30s", "show me the About page"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "Which page") {
		t.Fatalf("send: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	// A credential that is not the integrator's cannot publish as it.
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"send", "--nats", url, "--nats-nkey", filepath.Join(authDir, "gate.nk"), "-t", "t2", "--publish-timeout", "2s", "hi"},
		strings.NewReader(""), &stdout, &stderr)
	if code == 0 {
		t.Fatalf("send with the gate's nkey: exit 0\n%s", stdout.String())
	}
}

// Without authentication, parley dev serves NATS only on a loopback
// address.
func TestDevNoAuthOnlyOnLoopback(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"dev", "--no-auth", "--listen", "0.0.0.0:0", "--gateway-listen", "off", "--data-dir", t.TempDir()},
		strings.NewReader(""), &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "not a loopback address: refusing to serve NATS there without authentication") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// The gateway of parley dev runs on its own principal: a message posted
// over HTTP is published under parley.in.gateway and runs to its question.
func TestDevGatewayUnderAuth(t *testing.T) {
	dir := t.TempDir()
	url, out := startDevCmdGateway(t, dir, "127.0.0.1:0")
	waitToolsRegistered(t, adminJS(t, url, dir))
	m := regexp.MustCompile(`Web chat: (http://\S+)/#token=(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no gateway URL in:\n%s", out.String())
	}
	base, token := m[1], m[2]
	req, _ := http.NewRequest("POST", base+"/v1/threads/g1/messages", strings.NewReader(`{"text":"show me the About page"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST message: %d %s", resp.StatusCode, body)
	}
	// The turn runs: the thread's state shows its question.
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest("GET", base+"/v1/threads/g1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "Which page") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET thread: %d %s\ndev output:\n%s", resp.StatusCode, body, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its readiness probe passes on its own principal (it lists the
	// stream names), without a token.
	resp, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"ready"`) {
		t.Errorf("GET /readyz = %d %s, want 200 ready", resp.StatusCode, body)
	}
	if strings.Contains(strings.ToLower(out.String()), "permissions violation") {
		t.Errorf("permissions violations:\n%s", out.String())
	}
}

// `parley chat` against `parley dev` under auth, with no credential
// flags: a confirmation runs end to end and names the entities by their
// titles (read from the site with the integrator's read permission).
func TestChatUnderDevAuth(t *testing.T) {
	dir := t.TempDir()
	url := startDevCmd(t, dir)
	t.Setenv("PARLEY_DATA_DIR", dir)
	js := adminJS(t, url, dir)
	waitToolsRegistered(t, js)
	h := startChat(t, url, t.Context(), "chat-auth")
	h.typeLine("delete the 10 draft articles")
	h.waitFor("tool:        delete_entities")
	h.waitMatch(regexp.MustCompile(`entities:    \S+ "[^"]+"\n`))
	h.waitFor("Allow? [y/n/c")
	h.typeLine("n")
	h.waitFor("Instructions for the agent (optional): ")
	h.typeLine("not now")
	h.waitFor("→ declined")
	h.waitFor("you> ")
	h.quit()
}

// adminJS is a JetStream context of dev's admin principal (dataDir's seed).
func adminJS(t *testing.T, url, dataDir string) jetstream.JetStream {
	t.Helper()
	admin := natsauth.Credentials{NKeyFile: filepath.Join(dataDir, "auth", "admin.nk"), Principal: natsauth.Admin}
	nc, err := natsauth.Connect(url, "test-admin", admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return js
}

// waitToolsRegistered waits until the tool-executor registered its tools.
func waitToolsRegistered(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		kv, err := js.KeyValue(t.Context(), "parley_tools")
		if err == nil {
			if _, err = kv.Get(t.Context(), builtin.ToolDeleteEntities); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool-executor did not register its tools: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// parley dev keeps the gateway token in <data-dir>/gateway-token (0600)
// and prints that path next to the URL; a stale token is told where the
// token comes from; a message to the agent "support" (README's example)
// meets dev's policy, which vetoes its delete with the reason, as the
// thread's turn.completed records.
func TestDevGatewayTokenFileAndPolicy(t *testing.T) {
	dir := t.TempDir()
	url, out := startDevCmdGateway(t, dir, "127.0.0.1:0")
	waitToolsRegistered(t, adminJS(t, url, dir))
	m := regexp.MustCompile(`Web chat: (http://\S+)/#token=(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no gateway URL in:\n%s", out.String())
	}
	base, token := m[1], m[2]
	path := filepath.Join(dir, "gateway-token")
	data, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(data)) != token {
		t.Fatalf("%s = %q, %v; want the printed token %q", path, data, err, token)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", path, fi.Mode().Perm())
	}
	if !strings.Contains(out.String(), "kept in "+path) {
		t.Errorf("dev's output does not name %s:\n%s", path, out.String())
	}

	do := func(method, p, tok, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+p, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/v1/threads", "dev-stale-0123456789abcdef", ""); code != http.StatusUnauthorized ||
		!strings.Contains(body, "token not accepted") || !strings.Contains(body, path) {
		t.Errorf("stale token: %d %s, want 401 saying token not accepted and naming %s", code, body, path)
	}
	if code, body := do("POST", "/v1/threads/veto1/messages", token, `{"text":"delete the 10 draft articles","agent":"support"}`); code != http.StatusAccepted {
		t.Fatalf("POST message: %d %s", code, body)
	}
	// The thread's event stream carries the turn's decisions.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/threads/veto1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var seen strings.Builder
	for sc.Scan() {
		line := sc.Text()
		seen.WriteString(line + "\n")
		if strings.Contains(line, "turn.completed") && strings.Contains(line, `"decision":"veto"`) &&
			strings.Contains(line, "support agents never delete content") {
			return
		}
	}
	t.Fatalf("no veto in the thread's events (%v):\n%s\ndev output:\n%s", sc.Err(), seen.String(), out.String())
}

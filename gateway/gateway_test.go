package gateway

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/goccy/go-yaml"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

const devTok = "dev-token-0123456789abcdef"

func newTestGateway(t *testing.T, opts *Options) *Gateway {
	t.Helper()
	srv := bustest.NewServer(t)
	b, err := bus.New(srv.Connect(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(t.Context()); err != nil { // the workers' job
		t.Fatal(err)
	}
	g, err := New(t.Context(), b, StaticTokens{devTok: "dev"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// echoInput copies the gateway's last input on thread (suffix) from
// PARLEY_INPUT into PARLEY_CHAT, as the processor does once it accepted it
// (these tests run no processor).
func echoInput(t *testing.T, g *Gateway, thread, suffix string) {
	t.Helper()
	s, err := g.bus.JetStream().Stream(t.Context(), events.StreamInput)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), events.InputSubject(events.PrincipalGateway, thread, suffix))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(events.Header(m.Header), m.Data)
	if err != nil {
		t.Fatal(err)
	}
	e.SetExtension(events.ExtPrincipal, events.PrincipalGateway)
	if d, err := events.Data[events.TurnRequested](e); err == nil && d.User != "" {
		e.SetExtension(events.ExtOnBehalfOf, d.User) // the processor honours the gateway's claim
	}
	if _, err := g.bus.Publish(t.Context(), events.ChatSubject(thread, suffix), e); err != nil {
		t.Fatal(err)
	}
}

func request(t *testing.T, h http.Handler, method, path, token, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The OpenAPI document lists exactly the routes the gateway serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	data, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parsing docs/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []Route
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, Route{strings.ToUpper(method), path})
		}
	}
	key := func(r Route) string { return r.Method + " " + r.Path }
	cmp := func(a, b Route) int { return strings.Compare(key(a), key(b)) }
	slices.SortFunc(documented, cmp)
	served := slices.SortedFunc(slices.Values(slices.Concat(Routes, PublicRoutes)), cmp)
	if !slices.Equal(documented, served) {
		t.Fatalf("documented routes %v\nserved routes %v", documented, served)
	}
	// Every route is really routed (not the catch-all "no such route").
	g := newTestGateway(t, nil)
	for _, rt := range slices.Concat(Routes, PublicRoutes) {
		path := strings.NewReplacer("{thread}", "t1", "{id}", "e1", "{user}", "u1",
			"{file}", "dev.parley.turn.requested.json").Replace(rt.Path)
		w := request(t, g.Handler(), rt.Method, path, devTok, `{"text":"hi","action":"accept"}`, nil)
		if w.Code == http.StatusMethodNotAllowed || strings.Contains(w.Body.String(), "no such route") ||
			slices.Contains(PublicRoutes, rt) && w.Code != http.StatusOK {
			t.Errorf("%s %s is documented but not served: %d %s", rt.Method, path, w.Code, w.Body)
		}
	}
	if w := request(t, g.Handler(), "GET", "/v1/nothing", devTok, "", nil); w.Code != 404 ||
		!strings.Contains(w.Body.String(), "no such route") {
		t.Errorf("GET /v1/nothing = %d %s, want the 404 problem", w.Code, w.Body)
	}
}

func TestRateLimitRetryAfter(t *testing.T) {
	g := newTestGateway(t, &Options{RatePerSecond: 0.5, RateBurst: 2})
	for i := range 2 {
		if w := request(t, g.Handler(), "GET", "/v1/threads", devTok, "", nil); w.Code != 200 {
			t.Fatalf("request %d = %d %s, want 200", i, w.Code, w.Body)
		}
	}
	w := request(t, g.Handler(), "GET", "/v1/threads", devTok, "", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request = %d, want 429", w.Code)
	}
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Fatalf("Retry-After = %q, want 1-2 seconds", w.Header().Get("Retry-After"))
	}
}

func TestBodyTooLarge(t *testing.T) {
	g := newTestGateway(t, &Options{MaxBodyBytes: 1024})
	body := `{"text":"` + strings.Repeat("x", 2000) + `"}`
	w := request(t, g.Handler(), "POST", "/v1/threads/big/messages", devTok, body, nil)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), ReasonTooLarge) ||
		!strings.Contains(w.Body.String(), "over 1024 bytes") {
		t.Fatalf("large body = %d %s, want 413 too_large", w.Code, w.Body)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", `{"text":"hi","bogus":1}`, `"path":"bogus"`},
		{"repeated member", `{"text":"hi","text":"delete everything"}`, `"path":"text"`},
		{"invalid UTF-8", "{\"text\":\"hi \xff\"}", `"path":"text","rule":"invalid UTF-8`},
		{"unpaired surrogate", `{"text":"hi \ud800"}`, `"path":"text"`},
		{"repeated member in a block", `{"text":"hi","content":[{"type":"text","text":"a","text":"b"}]}`, `"path":"content[0].text"`},
		{"no text", `{"text":"  "}`, `"path":"text"`},
		{"bad agent", `{"text":"hi","agent":"a.b"}`, `"path":"agent"`},
		{"trailing", `{"text":"hi"} {}`, "trailing"},
	} {
		w := request(t, g.Handler(), "POST", "/v1/threads/t/messages", devTok, tc.body, nil)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, w.Code, w.Body, tc.want)
		}
	}
	w = request(t, g.Handler(), "POST", "/v1/threads/a.b/messages", devTok, `{"text":"hi"}`, nil)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"path":"thread"`) {
		t.Errorf("thread a.b: %d %s, want 400 naming thread", w.Code, w.Body)
	}
	w = request(t, g.Handler(), "POST", "/v1/threads/t/elicitations/e1", devTok, `{"action":"maybe"}`, nil)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"path":"action"`) {
		t.Errorf("action maybe: %d %s, want 400 naming action", w.Code, w.Body)
	}
}

func TestCORS(t *testing.T) {
	g := newTestGateway(t, &Options{AllowedOrigins: []string{"https://app.example"}})
	pre := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type"}
	w := request(t, g.Handler(), "OPTIONS", "/v1/threads/t/messages", "", "", pre)
	if w.Code != 204 || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(w.Header().Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight = %d %v", w.Code, w.Header())
	}
	pre["Origin"] = "https://evil.example"
	w = request(t, g.Handler(), "OPTIONS", "/v1/threads/t/messages", "", "", pre)
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from a foreign origin allowed: %v", w.Header())
	}
	w = request(t, g.Handler(), "GET", "/v1/threads", devTok, "", map[string]string{"Origin": "https://app.example"})
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("GET with origin = %d %v", w.Code, w.Header())
	}
}

// Shutdown ends open event streams cleanly and Serve returns nil.
func TestServeShutdownEndsStreams(t *testing.T) {
	g := newTestGateway(t, &Options{Heartbeat: 50 * time.Millisecond})
	// Claim a thread for dev so its stream can be opened.
	if w := request(t, g.Handler(), "POST", "/v1/threads/s1/messages", devTok, `{"text":"hi"}`, nil); w.Code != 202 {
		t.Fatalf("post = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "s1", events.ChatTurnRequested)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/v1/threads/s1/events", nil)
	req.Header.Set("Authorization", "Bearer "+devTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), ": heartbeat") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("reading the stream: %v (read %q)", err, got.String())
		}
	}
	if !strings.Contains(got.String(), "id: 1\ndata: {") || !strings.Contains(got.String(), `"type":"dev.parley.turn.requested"`) {
		t.Fatalf("stream = %q, want the turn.requested event with id 1", got.String())
	}
	cancel()
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("stream did not end cleanly: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream is still open 5 s after shutdown began")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
}

func TestParseStaticTokens(t *testing.T) {
	st, err := ParseStaticTokens("f", strings.NewReader("# comment\n\nabcdefghijklmnop alice\nqrstuvwxyz012345 bob\n"))
	if err != nil || len(st) != 2 || st["abcdefghijklmnop"] != "alice" {
		t.Fatalf("ParseStaticTokens = %v, %v", st, err)
	}
	if sub, err := st.Authenticate(t.Context(), "qrstuvwxyz012345"); err != nil || sub != "bob" {
		t.Fatalf("Authenticate = %q, %v", sub, err)
	}
	if _, err := st.Authenticate(t.Context(), "qrstuvwxyz01234"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Authenticate(prefix) = %v, want ErrUnauthenticated", err)
	}
	for _, bad := range []struct{ in, want string }{
		{"short alice\n", "f:1: token must be at least 16"},
		{"abcdefghijklmnop\n", "f:1: want \"token subject\""},
		{"abcdefghijklmnop a\nabcdefghijklmnop b\n", "f:2: token listed twice"},
		{"# nothing\n", "no tokens"},
	} {
		if _, err := ParseStaticTokens("f", strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseStaticTokens(%q) = %v, want %q", bad.in, err, bad.want)
		}
	}
}

// testIssuer is a JWT issuer (https://idp.example, audience parley)
// with its JWKS served; sign signs claims with key k.
type testIssuer struct {
	key *rsa.PrivateKey
	j   *JWT
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: key.Public(), KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	}))
	t.Cleanup(jwks.Close)
	j, err := NewJWT(context.Background(), JWTConfig{Issuer: "https://idp.example", Audience: "parley", JWKSURL: jwks.URL, ClockSkew: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuer{key: key, j: j}
}

func (ti *testIssuer) sign(t *testing.T, k *rsa.PrivateKey, c josejwt.Claims) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// token is a valid token of the issuer for sub.
func (ti *testIssuer) token(t *testing.T, sub string) string {
	now := time.Now()
	return ti.sign(t, ti.key, josejwt.Claims{Issuer: "https://idp.example", Audience: josejwt.Audience{"parley"}, Subject: sub,
		Expiry: josejwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: josejwt.NewNumericDate(now)})
}

func TestJWT(t *testing.T) {
	ti := newTestIssuer(t)
	key, j := ti.key, ti.j
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	sign := func(k *rsa.PrivateKey, c josejwt.Claims) string { return ti.sign(t, k, c) }
	now := time.Now()
	good := josejwt.Claims{Issuer: "https://idp.example", Audience: josejwt.Audience{"parley"}, Subject: "alice",
		Expiry: josejwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: josejwt.NewNumericDate(now)}
	with := func(f func(*josejwt.Claims)) josejwt.Claims { c := good; f(&c); return c }
	for _, tc := range []struct {
		name string
		tok  string
		ok   bool
	}{
		{"valid", sign(key, good), true},
		{"expired within skew", sign(key, with(func(c *josejwt.Claims) { c.Expiry = josejwt.NewNumericDate(now.Add(-30 * time.Second)) })), true},
		{"expired beyond skew", sign(key, with(func(c *josejwt.Claims) { c.Expiry = josejwt.NewNumericDate(now.Add(-2 * time.Minute)) })), false},
		{"wrong audience", sign(key, with(func(c *josejwt.Claims) { c.Audience = josejwt.Audience{"other"} })), false},
		{"wrong issuer", sign(key, with(func(c *josejwt.Claims) { c.Issuer = "https://evil.example" })), false},
		{"no subject", sign(key, with(func(c *josejwt.Claims) { c.Subject = "" })), false},
		{"other key", sign(other, good), false},
		{"garbage", "not.a.jwt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := j.Authenticate(context.Background(), tc.tok)
			if want := JWTUser("https://idp.example", "alice"); tc.ok && (err != nil || sub != want) {
				t.Fatalf("Authenticate = %q, %v; want %s", sub, err, want)
			}
			if !tc.ok && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Authenticate = %q, %v; want ErrUnauthenticated", sub, err)
			}
		})
	}
	if _, err := NewJWT(context.Background(), JWTConfig{}); err == nil ||
		!strings.Contains(err.Error(), "issuer") || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("NewJWT(empty) = %v, want every missing field named", err)
	}
}

func TestLimitersBounded(t *testing.T) {
	ls := newLimiters(1, 1, 3)
	now := time.Now()
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		ls.allow(u, now)
	}
	if len(ls.m) > 3 {
		t.Fatalf("limiters hold %d users, want at most 3", len(ls.m))
	}
}

// The web chat is served with its Content-Security-Policy; other methods
// are refused.
func TestWebServed(t *testing.T) {
	g := newTestGateway(t, nil)
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		w := request(t, g.Handler(), "GET", path, "", "", nil)
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Security-Policy"), "script-src 'self'") ||
			w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s = %d %v", path, w.Code, w.Header())
		}
	}
	if w := request(t, g.Handler(), "POST", "/", "", "x", nil); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d, want 405", w.Code)
	}
	if w := request(t, g.Handler(), "GET", "/", "", "", nil); !strings.Contains(w.Body.String(), `<script src="app.js" defer>`) {
		t.Errorf("GET / is not the web chat: %.200s", w.Body.String())
	}
}

// A JWT user and a token-file user with the same subject are two users,
// and so are the users of two issuers: the gateway's name of a JWT user
// carries its issuer (JWTUser), and a token file cannot name a JWT user.
func TestIdentitiesOfIssuersNeverCollide(t *testing.T) {
	static, err := ParseStaticTokens("f", strings.NewReader("devtoken-0123456789 dev\n"))
	if err != nil {
		t.Fatal(err)
	}
	tokenDev, err := static.Authenticate(context.Background(), "devtoken-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	a, b := JWTUser("https://idp-a.example", "dev"), JWTUser("https://idp-b.example", "dev")
	if tokenDev != "dev" || a == tokenDev || b == tokenDev || a == b || !strings.HasPrefix(a, "dev@jwt-") {
		t.Fatalf("token-file dev %q, JWT dev of idp-a %q, of idp-b %q: want three names", tokenDev, a, b)
	}
	if _, err := ParseStaticTokens("f", strings.NewReader("devtoken-0123456789 "+a+"\n")); err == nil {
		t.Errorf("a token file named the JWT user %s", a)
	}
	// A JWT user shares with "bob" of their own issuer; a token-file user
	// names users as given.
	if got := sameIssuer(a, "bob"); got != JWTUser("https://idp-a.example", "bob") {
		t.Errorf("sameIssuer(%s, bob) = %s", a, got)
	}
	if got := sameIssuer(a, b); got != b {
		t.Errorf("sameIssuer(%s, %s) = %s, want it as given", a, b, got)
	}
	if got := sameIssuer("dev", "bob"); got != "bob" {
		t.Errorf("sameIssuer(dev, bob) = %s, want bob", got)
	}
}

// Two gateways on one bus, one authenticating a token file and one JWTs
// (both the gateway principal): token-file user dev's thread is not JWT
// user dev's. The JWT user gets 404 on it, does not list it, and cannot
// post to it (nothing published).
func TestTokenUserAndJWTUserAreTwoUsers(t *testing.T) {
	srv := bustest.NewServer(t)
	ti := newTestIssuer(t)
	gateways := map[string]*Gateway{}
	for name, auth := range map[string]Authenticator{"token": StaticTokens{devTok: "dev"}, "jwt": ti.j} {
		b, err := bus.New(srv.Connect(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EnsureStreams(t.Context()); err != nil {
			t.Fatal(err)
		}
		if gateways[name], err = New(t.Context(), b, auth, nil); err != nil {
			t.Fatal(err)
		}
	}
	tokenGW, jwtGW, jwtDev := gateways["token"], gateways["jwt"], ti.token(t, "dev")
	if w := request(t, tokenGW.Handler(), "POST", "/v1/threads/mine/messages", devTok, `{"text":"hi"}`, nil); w.Code != 202 {
		t.Fatalf("token dev's post = %d %s", w.Code, w.Body)
	}
	echoInput(t, tokenGW, "mine", events.ChatTurnRequested)
	if w := request(t, tokenGW.Handler(), "GET", "/v1/threads/mine", devTok, "", nil); w.Code != 200 {
		t.Fatalf("token dev reading their thread = %d %s", w.Code, w.Body)
	}
	if w := request(t, jwtGW.Handler(), "GET", "/v1/threads/mine", jwtDev, "", nil); w.Code != 404 {
		t.Errorf("JWT dev reading token dev's thread = %d %s, want 404", w.Code, w.Body)
	}
	if w := request(t, jwtGW.Handler(), "GET", "/v1/threads", jwtDev, "", nil); w.Code != 200 || strings.Contains(w.Body.String(), "mine") {
		t.Errorf("JWT dev's threads = %d %s, want none", w.Code, w.Body)
	}
	if w := request(t, jwtGW.Handler(), "POST", "/v1/threads/mine/messages", jwtDev, `{"text":"hello"}`, nil); w.Code != 404 {
		t.Errorf("JWT dev posting to token dev's thread = %d %s, want 404", w.Code, w.Body)
	}
}

// TestMemberNamesAreCaseSensitive: encoding/json matches member names
// case-insensitively, so {"action":"decline","Action":"accept"} passed
// the duplicate check and was decoded as accept (and the call ran); the
// processor refuses "Action" on NATS. Every body member must name a
// member exactly.
func TestMemberNamesAreCaseSensitive(t *testing.T) {
	g := newTestGateway(t, nil)
	for _, tc := range []struct{ name, url, body, want string }{
		{"answer Action after action", "/v1/threads/t/elicitations/e1", `{"action":"decline","Action":"accept"}`, `"path":"Action"`},
		{"answer ACTION alone", "/v1/threads/t/elicitations/e1", `{"ACTION":"accept"}`, `"path":"ACTION"`},
		{"answer Content", "/v1/threads/t/elicitations/e1", `{"action":"accept","Content":{"title":"a"}}`, `"path":"Content"`},
		{"message Text after text", "/v1/threads/t/messages", `{"text":"hi","Text":"delete everything"}`, `"path":"Text"`},
		{"message Agent", "/v1/threads/t/messages", `{"text":"hi","Agent":"other"}`, `"path":"Agent"`},
	} {
		w := request(t, g.Handler(), "POST", tc.url, devTok, tc.body, nil)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tc.want) || !strings.Contains(w.Body.String(), "unknown member") {
			t.Errorf("%s: %d %s, want 400 naming %s as an unknown member", tc.name, w.Code, w.Body, tc.want)
		}
	}
}

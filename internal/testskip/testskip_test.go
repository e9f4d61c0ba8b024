package testskip

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of
// stopping.
type recorder struct {
	testing.TB
	name, fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Name() string                   { return r.name }
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

// Skip skips and records a test outside CI, fails it under CI=true; the
// summary lists each need once, with its tests and its install command.
func TestSkipAndSummary(t *testing.T) {
	t.Setenv("CI", "true")
	ci := &recorder{TB: t, name: "TestUnderCI"}
	Skip(ci, Chromium, "not on PATH")
	if ci.fatal == "" || !strings.Contains(ci.fatal, "apt-get install chromium") {
		t.Errorf("under CI=true: fatal %q, want a failure naming the install command", ci.fatal)
	}
	t.Setenv("CI", "")
	for _, name := range []string{"TestBrowserA", "TestBrowserB/one", "TestBrowserB/two", "TestBrowserA"} {
		r := &recorder{TB: t, name: name}
		Skip(r, Chromium, "not on PATH")
		if r.skip == "" || r.fatal != "" {
			t.Errorf("%s: skip %q, fatal %q; want a skip", name, r.skip, r.fatal)
		}
	}
	Record(&recorder{TB: t, name: "TestShapes"}, MCPSchemas, "missing")
	want := "--- parley: 2 test(s) of ./internal/testskip skipped (and 1 ran without a check): tools not installed\n" +
		"    chromium: TestBrowserA, TestBrowserB\n" +
		"        install: " + Chromium.Install + "\n" +
		"    the official MCP JSON schemas: TestShapes (ran without it)\n" +
		"        install: " + MCPSchemas.Install + "\n"
	if got := Summary(); got != want {
		t.Errorf("Summary =\n%s\nwant\n%s", got, want)
	}
	reset() // not this binary's own skips
}

func TestAppendFlag(t *testing.T) {
	for _, tc := range []struct {
		fdinfo string
		want   bool
	}{
		{"pos:\t0\nflags:\t0102001\nmnt_id:\t30\n", true}, // O_APPEND|O_WRONLY|O_LARGEFILE
		{"pos:\t12\nflags:\t0100001\nmnt_id:\t30\n", false},
		{"pos:\t0\n", false},
	} {
		if got := appendFlag(tc.fdinfo); got != tc.want {
			t.Errorf("appendFlag(%q) = %v, want %v", tc.fdinfo, got, tc.want)
		}
	}
}

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// innerEnv marks the go test run that TestBlockShownByPlainGoTest starts.
const innerEnv = "PARLEY_TESTSKIP_INNER"

// TestInner skips for want of a tool, in the inner run only.
func TestInner(t *testing.T) {
	if os.Getenv(innerEnv) != "" {
		Skip(t, Need{"a tool of the inner run", "echo installed"}, "missing on purpose")
	}
}

// A plain `go test` (no -v) of a package that passes with a skipped test
// shows the block on the go command's output, when that is a pipe and
// when it is a file opened for append (the test runs the go command on
// this package, TestInner only).
func TestBlockShownByPlainGoTest(t *testing.T) {
	if os.Getenv(innerEnv) != "" {
		t.Skip("inside the inner run")
	}
	if testing.Short() {
		t.Skip("-short: runs go test")
	}
	if _, err := os.Stat("/proc/self/fdinfo"); err != nil {
		t.Skip("no /proc: the block goes to /dev/tty or stderr")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	want := "--- parley: 1 test(s) of ./internal/testskip skipped: tools not installed\n" +
		"    a tool of the inner run: TestInner\n        install: echo installed\n"
	run := func(out *os.File) {
		cmd := exec.Command(goBin, "test", "-count=1", "-run", "^TestInner$", ".")
		cmd.Env = append(os.Environ(), innerEnv+"=1", "CI=")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			t.Fatalf("go test: %v", err)
		}
	}
	// A pipe, as in CI logs and `| tee`.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	run(w)
	w.Close()
	if got := <-done; !strings.Contains(got, want) || !strings.Contains(got, "ok  \t") {
		t.Errorf("through a pipe, go test printed\n%s\nwant the block\n%s", got, want)
	}
	// A file opened for append (`>> log`).
	path := t.TempDir() + "/log"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	run(f)
	f.Close()
	if got, _ := os.ReadFile(path); !strings.Contains(string(got), want) || !strings.Contains(string(got), "ok  \t") {
		t.Errorf("into a file opened for append, go test printed\n%s\nwant the block\n%s", got, want)
	}
}

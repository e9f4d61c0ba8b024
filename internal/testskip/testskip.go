// Package testskip makes the tests that skip for want of a tool (chromium,
// node and pinned npm packages, the official MCP schemas, kustomize)
// visible in a plain `go test ./...`, which prints only "ok" for a package
// that passes, however many of its tests skipped. Import it only from
// _test.go files.
//
// A test calls Skip (or Record, when it goes on without the check) with
// the Need it lacks; TestMain calls Run instead of m.Run. Under CI=true a
// missing need fails the test instead (CI installs everything). After the
// tests, Run prints one block naming the package, each need with the
// tests it skipped and the command that installs it:
//
//	--- parley: 6 test(s) of ./e2e skipped: tools not installed
//	    chromium: TestBrowserA, TestBrowserB, ...
//	        install: apt-get install chromium
//
// Where: go test buffers a test binary's output and drops it when the
// package passes (unless -v or -json), so the block goes to the go
// command's own standard error (/proc/<parent>/fd/2 on Linux) when that
// is a terminal, a pipe (CI logs, `| tee`) or a file opened for append;
// else to /dev/tty; else to the binary's stderr (shown with -v). With -v
// or -json it is part of the test output. A cached result ("ok (cached)")
// runs no test binary and prints no block: `go test -count=1` runs again.
//
// It imports no other parley package.
package testskip

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Need is something a test needs that may not be installed.
type Need struct {
	// Name says what it is ("chromium", "node and the npm packages of
	// e2e/testdata/mcp"); tests with one Name are listed together.
	Name string
	// Install is the command that installs it.
	Install string
}

// The needs of parley's suites, one place for their install commands.
var (
	Chromium     = Need{"chromium", "apt-get install chromium (or set PARLEY_CHROMIUM to a Chrome binary)"}
	MCPPackages  = Need{"node and the npm packages of e2e/testdata/mcp", "npm ci --prefix e2e/testdata/mcp --no-audit --no-fund"}
	AISDK        = Need{"node and the npm packages of gateway/testdata/aisdk (the AI SDK)", "npm ci --prefix gateway/testdata/aisdk --no-audit --no-fund"}
	AGUIPackages = Need{"node and the AG-UI client of gateway/testdata/agui", "npm ci --prefix gateway/testdata/agui --no-audit --no-fund"}
	AsyncAPI     = Need{"node and the AsyncAPI parser of events/testdata/asyncapi", "npm ci --prefix events/testdata/asyncapi --no-audit --no-fund"}
	MCPSchemas   = Need{"the official MCP JSON schemas", "git clone --depth 1 https://github.com/modelcontextprotocol/modelcontextprotocol /tmp/mcp-spec && export PARLEY_MCP_SCHEMAS=/tmp/mcp-spec/schema"}
	Kustomize    = Need{"kustomize or kubectl", "go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2"}
)

var (
	mu      sync.Mutex
	skipped = map[Need][]string{} // need -> test names, in order
)

// Skip records that tb lacks need (why says what is missing) and skips
// it; under CI=true it fails tb instead.
func Skip(tb testing.TB, need Need, why string) {
	tb.Helper()
	record(tb, need, why, "")
	tb.Skipf("%s: %s; install: %s", need.Name, why, need.Install)
}

// Record is Skip for a test that goes on without what need gives (a
// check it leaves out): it records tb's top-level test for Run's block,
// and fails tb under CI=true.
func Record(tb testing.TB, need Need, why string) {
	tb.Helper()
	record(tb, need, why, ranWithout)
}

// ranWithout marks, in Summary, a test that ran without a check.
const ranWithout = " (ran without it)"

// record is Skip's and Record's: suffix is "" for a skipped test,
// ranWithout for one that went on.
func record(tb testing.TB, need Need, why, suffix string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s: %s; CI=true requires it (install: %s)", need.Name, why, need.Install)
		return
	}
	// A test is listed once, however many of its subtests skipped.
	name, _, _ := strings.Cut(tb.Name(), "/")
	name += suffix
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(skipped[need], name) {
		skipped[need] = append(skipped[need], name)
	}
}

// Run runs the tests (call it from TestMain: os.Exit(testskip.Run(m)))
// and prints the block of what Skip and Record recorded, if anything. It
// returns m.Run's status.
func Run(m *testing.M) int {
	code := m.Run()
	if s := Summary(); s != "" {
		w, done := output()
		fmt.Fprint(w, s)
		done()
	}
	return code
}

// reset forgets what was recorded (tests of this package).
func reset() {
	mu.Lock()
	defer mu.Unlock()
	skipped = map[Need][]string{}
}

// Summary is Run's block: "" when nothing was recorded.
func Summary() string {
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) == 0 {
		return ""
	}
	needs := make([]Need, 0, len(skipped))
	n, without := 0, 0
	for need, tests := range skipped {
		needs = append(needs, need)
		for _, t := range tests {
			if strings.HasSuffix(t, ranWithout) {
				without++
			} else {
				n++
			}
		}
	}
	slices.SortFunc(needs, func(a, b Need) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	also := ""
	if without > 0 {
		also = fmt.Sprintf(" (and %d ran without a check)", without)
	}
	fmt.Fprintf(&b, "--- parley: %d test(s) of %s skipped%s: tools not installed\n", n, packageDir(), also)
	for _, need := range needs {
		fmt.Fprintf(&b, "    %s: %s\n        install: %s\n", need.Name, strings.Join(skipped[need], ", "), need.Install)
	}
	return b.String()
}

// packageDir is the package's directory relative to the module root
// ("./e2e"), or the working directory.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "this package"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return wd
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// output returns where the block goes (see the package comment) and a
// function that closes it.
func output() (io.Writer, func()) {
	if testing.Verbose() {
		return os.Stdout, func() {} // -v and -json show the test output
	}
	if f := parentStderr(); f != nil {
		return f, func() { f.Close() }
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return tty, func() { tty.Close() }
	}
	return os.Stderr, func() {}
}

// parentStderr opens the standard error of the process that started the
// test binary (the go command), or returns nil: when it is not a
// terminal, a pipe or a file opened for append (a file opened without
// O_APPEND would have the block overwritten by the go command's next
// write, which goes at its own offset).
func parentStderr() *os.File {
	ppid := os.Getppid()
	path := fmt.Sprintf("/proc/%d/fd/2", ppid)
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	switch mode := fi.Mode(); {
	case mode&os.ModeCharDevice != 0, mode&os.ModeNamedPipe != 0, mode&os.ModeSocket != 0:
	case mode.IsRegular():
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/2", ppid))
		if err != nil || !appendFlag(string(info)) {
			return nil
		}
	default:
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

// appendFlag reports whether a /proc/<pid>/fdinfo/<fd> text has O_APPEND
// in its octal "flags:" line.
func appendFlag(fdinfo string) bool {
	for line := range strings.Lines(fdinfo) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			var flags int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%o", &flags); err != nil {
				return false
			}
			return flags&syscall.O_APPEND != 0
		}
	}
	return false
}

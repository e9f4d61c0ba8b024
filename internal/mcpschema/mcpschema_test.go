package mcpschema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/parley-dev/parley/internal/testskip"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Name() string                   { return "TestRecorded" }
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }

// A missing schema directory fails under CI=true, and is recorded (for
// Run's block) without failing elsewhere.
func TestFindMissing(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	for _, tt := range []struct {
		ci       string
		wantFail bool
	}{{"true", true}, {"", false}} {
		t.Setenv("CI", tt.ci)
		r := &recorder{TB: t}
		dir, why := Find(r, "2025-06-18")
		if dir != "" || why == "" {
			t.Errorf("CI=%q: Find = %q, %q; want no directory and a reason", tt.ci, dir, why)
		}
		if (r.fatal != "") != tt.wantFail {
			t.Errorf("CI=%q: failed = %v (%q), want %v", tt.ci, r.fatal != "", r.fatal, tt.wantFail)
		}
		if recorded := strings.Contains(testskip.Summary(), "TestRecorded"); recorded == tt.wantFail {
			t.Errorf("CI=%q: recorded = %v, want %v; summary:\n%s", tt.ci, recorded, !tt.wantFail, testskip.Summary())
		}
	}
}

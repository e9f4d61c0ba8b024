package client

import (
	"strings"
	"testing"
	"time"
)

// A short wait is said as it was, not rounded to "0s".
func TestNoVerdictErrorSaysTheWait(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Millisecond:        "within 1ms",
		40 * time.Millisecond:   "within 40ms",
		2345 * time.Millisecond: "within 2.3s",
	} {
		if got := (&NoVerdictError{EventID: "e1", Waited: d}).Error(); !strings.Contains(got, want) {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

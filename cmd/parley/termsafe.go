package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// safeWriter writes to w what it is given with every character that a
// terminal would act on instead of showing escaped: C0 controls but
// newline and tab (ESC starts ANSI sequences: colours, cursor moves,
// window titles, OSC 52 clipboard writes; CR overwrites a line), DEL, C1
// controls (U+0080-U+009F: CSI, OSC), Unicode bidirectional overrides and
// isolates (which reorder what a person reads), and bytes that are not
// UTF-8. A control is shown as \u001b — also valid inside a JSON string,
// so JSON lines stay JSON. Model, tool and user text reaches parley's
// terminal commands through it.
type safeWriter struct{ w io.Writer }

// terminalSafe wraps w (see safeWriter).
func terminalSafe(w io.Writer) io.Writer {
	if _, ok := w.(safeWriter); ok {
		return w
	}
	return safeWriter{w}
}

func (s safeWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, sanitize(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// unsafeRune reports whether a terminal could act on r.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// sanitize returns s with unsafe characters escaped (see safeWriter).
func sanitize(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// withSafeOutput returns a copy of e whose stdout escapes what a terminal
// would act on (model and user text in printed events).
func (e *env) withSafeOutput() *env {
	cp := *e
	cp.stdout = terminalSafe(e.stdout)
	return &cp
}

package openai

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// The end marker is seen however the body is cut into reads, with or
// without the space after "data:", and after CRLF line ends; text that
// only mentions [DONE] is not the marker.
func TestDoneWatchSeesTheEndMarker(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{"data: {\"a\":1}\n\ndata: [DONE]\n\n", true},
		{"data: {\"a\":1}\r\n\r\ndata:[DONE]\r\n\r\n", true},
		{"data: [DONE]", true},
		{"data: {\"a\":1}\n\n", false},
		{"data: {\"content\":\"data: [DONE]\"}\n\n", false},
		{": data: [DONE]\n\n", false},
	} {
		for _, oneByte := range []bool{false, true} {
			var w doneWatch
			var r io.Reader = &doneReader{ReadCloser: io.NopCloser(strings.NewReader(tt.body)), w: &w}
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			if _, err := io.ReadAll(r); err != nil {
				t.Fatal(err)
			}
			if w.seen != tt.want {
				t.Errorf("body %q (one byte per read: %v): seen = %v, want %v", tt.body, oneByte, w.seen, tt.want)
			}
		}
	}
}

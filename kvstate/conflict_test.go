package kvstate

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict is the one classifier of lost compare-and-set writes: a
// single server's code (10071) and a replicated stream's (10164) alike,
// bare or wrapped, and nothing else.
func TestIsConflict(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"ErrConflict", fmt.Errorf("writing: %w", ErrConflict), true},
		{"key exists", jetstream.ErrKeyExists, true},
		{"revision mismatch", fmt.Errorf("updating: %w", jetstream.ErrKeyRevisionMismatch), true},
		{"10071", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{"10164", fmt.Errorf("publishing: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}), true},
		{"other API error", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, false},
		{"not found", jetstream.ErrKeyNotFound, false},
		{"plain", errors.New("connection closed"), false},
	}
	for _, tt := range tests {
		if got := IsConflict(tt.err); got != tt.want {
			t.Errorf("IsConflict(%s: %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

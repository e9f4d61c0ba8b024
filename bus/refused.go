package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// PermissionError is a publish the server's permissions refuse this
// connection: Subject is the refused subject. It wraps
// nats.ErrPermissionViolation. Publish returns it as soon as the server
// says so, rather than waiting for a JetStream acknowledgement that cannot
// come; it is never retried.
type PermissionError struct {
	Subject string
	Err     error // as the server reported it
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("the NATS server refused publishing to %q to these credentials (permissions violation): "+
		"the subject is another principal's, or the credentials are not the ones meant", e.Subject)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// refusals tells publishes waiting for an acknowledgement that the server
// refused their subject (an asynchronous -ERR, which nats.go hands to the
// connection's error handler, not to the publish).
type refusals struct {
	mu      sync.Mutex
	waiting map[string]map[*refusalWait]struct{}
}

type refusalWait struct{ cancel context.CancelCauseFunc }

// refusedPublish matches the subject in the server's message
// ("Permissions Violation for Publish to \"<subject>\"").
var refusedPublish = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

// watchRefusals makes nc's error handler report refused publishes to
// the returned refusals, and then call the handler nc had.
func watchRefusals(nc *nats.Conn) *refusals {
	r := &refusals{waiting: map[string]map[*refusalWait]struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		r.notify(err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
	return r
}

// watch returns ctx, cancelled with a *PermissionError when the server
// refuses a publish to subject before stop is called.
func (r *refusals) watch(ctx context.Context, subject string) (_ context.Context, stop func()) {
	if r == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &refusalWait{cancel: cancel}
	r.mu.Lock()
	if r.waiting[subject] == nil {
		r.waiting[subject] = map[*refusalWait]struct{}{}
	}
	r.waiting[subject][w] = struct{}{}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.waiting[subject], w)
		if len(r.waiting[subject]) == 0 {
			delete(r.waiting, subject)
		}
		r.mu.Unlock()
		cancel(nil)
	}
}

// notify fails the publishes waiting on the subject err refuses.
func (r *refusals) notify(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := refusedPublish.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiting[m[1]] {
		w.cancel(&PermissionError{Subject: m[1], Err: err})
	}
}

// refused returns the *PermissionError ctx (from watch) was cancelled
// with, or nil.
func refused(ctx context.Context) *PermissionError {
	var pe *PermissionError
	if errors.As(context.Cause(ctx), &pe) {
		return pe
	}
	return nil
}

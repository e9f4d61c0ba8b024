package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// PermissionError is a publish the server's permissions refuse this
// connection (Subject is the refused subject), or the connection's reply
// inbox (Inbox: Subject is the refused subscription, and no
// acknowledgement or reply can reach the connection any more). It wraps
// nats.ErrPermissionViolation. Publish returns it as soon as the server
// says so, rather than waiting for a JetStream acknowledgement that cannot
// come; it is never retried.
type PermissionError struct {
	Subject string
	Inbox   bool
	Err     error // as the server reported it
}

func (e *PermissionError) Error() string {
	if e.Inbox {
		return fmt.Sprintf("the NATS server refused these credentials the reply inbox %q (permissions violation), "+
			"so no acknowledgement or reply can arrive: the credentials are another principal's than the inbox "+
			"prefix names (--nats-principal says whose they are)", e.Subject)
	}
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
	// inbox is the connection's reply inbox prefix and a "."; inboxRefused,
	// once the server refused a subscription under it, fails every
	// publish, waiting or to come.
	inbox        string
	inboxRefused *PermissionError
}

type refusalWait struct{ cancel context.CancelCauseFunc }

// refusedPublish and refusedSubscription match the subject in the
// server's message ("Permissions Violation for Publish to \"<subject>\"",
// "… for Subscription to …").
var (
	refusedPublish      = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)
	refusedSubscription = regexp.MustCompile(`(?i)permissions violation for subscription to "([^"]+)"`)
)

// watchRefusals makes nc's error handler report refused publishes to
// the returned refusals, and then call the handler nc had.
func watchRefusals(nc *nats.Conn) *refusals {
	inbox := nc.Opts.InboxPrefix
	if inbox == "" {
		inbox = nats.InboxPrefix
	}
	r := &refusals{waiting: map[string]map[*refusalWait]struct{}{}, inbox: strings.TrimSuffix(inbox, ".") + "."}
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
	if r.inboxRefused != nil {
		r.mu.Unlock()
		cancel(r.inboxRefused)
		return ctx, func() {}
	}
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

// notify fails the publishes waiting on the subject err refuses, or all
// of them, and every later one, when err refuses the reply inbox.
func (r *refusals) notify(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := refusedSubscription.FindStringSubmatch(err.Error()); m != nil && strings.HasPrefix(m[1], r.inbox) {
		if r.inboxRefused == nil {
			r.inboxRefused = &PermissionError{Subject: m[1], Inbox: true, Err: err}
		}
		for _, ws := range r.waiting {
			for w := range ws {
				w.cancel(r.inboxRefused)
			}
		}
		return
	}
	if m := refusedPublish.FindStringSubmatch(err.Error()); m != nil {
		for w := range r.waiting[m[1]] {
			w.cancel(&PermissionError{Subject: m[1], Err: err})
		}
	}
}

// refusedInbox is the refusal of the reply inbox, or nil.
func (r *refusals) refusedInbox() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inboxRefused == nil {
		return nil
	}
	return r.inboxRefused
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

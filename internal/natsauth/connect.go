package natsauth

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Credentials are how a connection authenticates and protects itself.
// All fields are optional; a zero value connects anonymously in plain
// text (which a server with parley's authorization refuses).
type Credentials struct {
	// CredsFile is a NATS .creds file (user JWT and nkey seed, for
	// servers in decentralised JWT mode).
	CredsFile string
	// NKeyFile is a file holding an nkey user seed (SU...), as written
	// by `parley auth init` and `parley dev`.
	NKeyFile string
	// TLSCA is a PEM file of the certificate authorities trusted to sign
	// the server's certificate.
	TLSCA string
	// TLSCert and TLSKey are the PEM client certificate and key for
	// mutual TLS; both or neither.
	TLSCert, TLSKey string
	// Principal names the principal the credentials belong to; it sets
	// the inbox prefix (_INBOX_<principal>), the only inbox parley's
	// permissions let it subscribe to. Empty: nats.go's _INBOX.
	Principal string
}

// Check reports a combination that cannot work: both a creds file and an
// nkey, a certificate without its key (or the reverse), an unreadable
// file.
func (c Credentials) Check() error {
	if c.CredsFile != "" && c.NKeyFile != "" {
		return errors.New("--nats-creds and --nats-nkey: give one, not both")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", c.CredsFile}, {"--nats-nkey", c.NKeyFile},
		{"--tls-ca", c.TLSCA}, {"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if c.Principal != "" {
		if err := CheckName(c.Principal); err != nil {
			return fmt.Errorf("--nats-principal: %w", err)
		}
	}
	return nil
}

// Authenticated reports whether the credentials identify a user.
func (c Credentials) Authenticated() bool { return c.CredsFile != "" || c.NKeyFile != "" }

// Options returns the nats.go options of the credentials.
func (c Credentials) Options() ([]nats.Option, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", c.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.Principal != "" {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(c.Principal)))
	}
	return opts, nil
}

// SyncQueueLen bounds how many messages a synchronous subscription of a
// parley connection holds before they are read (nats.SyncQueueLen), whose
// channel nats.go otherwise sizes for 65,536 messages: 512 KiB allocated
// and cleared per subscription. A message beyond the bound is dropped as a
// slow consumer (logged). (bus.RequestMany, the agent's scatter-gather
// pre-execute request, gathers on a channel of its own size.)
const SyncQueueLen = 1024

// Connect connects to the servers in url (comma-separated) as name with
// the credentials, reconnecting for ever once connected (a first
// connection that fails returns the error). Asynchronous errors — a
// permissions violation above all — are logged to log (nil: discarded).
// Errors never contain url's user information.
func Connect(url, name string, c Credentials, log *slog.Logger) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false), nats.ErrorHandler(asyncErrors(log)), nats.SyncQueueLen(SyncQueueLen))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, &redactedError{msg: "connecting to NATS at " + Redact(url) + ": " + Redact(err.Error()), err: err}
	}
	return nc, nil
}

// redactedError is err with a message that went through Redact; errors.Is
// and errors.As still see err (nats.ErrAuthorization, nats.ErrNoServers).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// asyncErrors logs the errors the server reports asynchronously (a
// publish or subscription its permissions refuse, a slow consumer).
func asyncErrors(log *slog.Logger) nats.ErrHandler {
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if log == nil {
			return
		}
		attrs := []any{"error", err.Error()}
		if sub != nil {
			attrs = append(attrs, "subject", sub.Subject)
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			log.Error("NATS permissions violation", attrs...)
			return
		}
		log.Warn("NATS asynchronous error", attrs...)
	}
}

// Redact returns s with the user information of every URL in it (a
// password, a user, a token: nats://user:pass@host, nats://token@host)
// replaced by "redacted", so s can be printed or logged. It works on a
// single URL, a comma-separated list, and text that quotes URLs.
func Redact(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		// A URL ends at a ',' (nats.go's list separator), a space, a
		// quote or the end; its user information is what precedes its
		// last '@' (a password may hold '/' or '@' unescaped).
		end := strings.IndexAny(s, ", \t\n\"'")
		if end < 0 {
			end = len(s)
		}
		auth := s[:end]
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			b.WriteString("redacted@")
			b.WriteString(auth[at+1:])
		} else {
			b.WriteString(auth)
		}
		s = s[end:]
	}
	return b.String()
}

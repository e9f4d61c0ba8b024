package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrDuplicateMismatch is matched by the error of Publish when JetStream
// dropped the event as a duplicate (its Nats-Msg-Id was stored within the
// duplicate window) but the message stored under that ID is not this
// event: another type, subject, thread (ce-subject) or source. The event
// was not stored; the caller's handler fails, so the message it handles is
// retried and then dead-lettered rather than silently lost.
var ErrDuplicateMismatch = errors.New("a different message holds this event's Nats-Msg-Id")

// DuplicateMismatchError is the error of Publish for a duplicate that does
// not match what is stored. It matches ErrDuplicateMismatch.
type DuplicateMismatchError struct {
	// Stream and Sequence locate the stored message.
	Stream   string
	Sequence uint64
	// ID is the Nats-Msg-Id (the event ID).
	ID string
	// Published and Stored describe both messages: subject, type,
	// ce-subject and ce-source.
	Published, Stored string
}

func (e *DuplicateMismatchError) Error() string {
	return fmt.Sprintf("event %s was dropped as a duplicate, but %s sequence %d holds a different message under that ID: "+
		"published %s, stored %s", e.ID, e.Stream, e.Sequence, e.Published, e.Stored)
}

// Is makes DuplicateMismatchError match ErrDuplicateMismatch.
func (e *DuplicateMismatchError) Is(target error) bool { return target == ErrDuplicateMismatch }

// duplicateCheckTimeout bounds the read of the stored message.
const duplicateCheckTimeout = 2 * time.Second

// identityHeaders are the CloudEvents attributes that say what an event is
// and whom it concerns: a stored message under the same ID that differs in
// one of them (or in the NATS subject) is another event.
var identityHeaders = []string{"ce-type", "ce-subject", "ce-source"}

// checkDuplicate compares msg (Nats-Msg-Id id), just published and
// acknowledged as a duplicate by ack, with the message stored at ack.Sequence. It returns a
// *DuplicateMismatchError when they are different events (NATS subject,
// type, ce-subject or source differ); nil when they are the same event, or
// when the stored message is gone (a work queue removes what was
// consumed, and limits drop old messages: nothing left to compare) or
// cannot be read (logged: the role's permissions must allow
// $JS.API.STREAM.MSG.GET on the streams it publishes to). Data
// is not compared: one event re-derived after a crash may word its detail
// differently (a delivery count, an error text); a differing body is
// logged.
func (c *Client) checkDuplicate(ctx context.Context, msg *nats.Msg, id string, ack *jetstream.PubAck) error {
	gctx, cancel := context.WithTimeout(ctx, duplicateCheckTimeout)
	stored, err := c.storedMsg(gctx, ack.Stream, ack.Sequence)
	cancel()
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			// Not readable (no permission for $JS.API.STREAM.MSG.GET on
			// the stream, an election): the duplicate stands unchecked,
			// as JetStream reported it, rather than failing the handler
			// on every redelivery.
			c.logger.WarnContext(ctx, "duplicate not checked against the stored message", "msg_id", id,
				"stream", ack.Stream, "stream_seq", ack.Sequence, "error", err)
		}
		return nil
	}
	describe := func(subject string, h nats.Header) string {
		s := subject
		for _, k := range identityHeaders {
			s += fmt.Sprintf(" %s=%q", k, h.Get(k))
		}
		return s
	}
	same := stored.Subject == msg.Subject
	for _, k := range identityHeaders {
		same = same && stored.Header.Get(k) == msg.Header.Get(k)
	}
	if !same {
		return &DuplicateMismatchError{Stream: ack.Stream, Sequence: ack.Sequence, ID: id,
			Published: describe(msg.Subject, msg.Header), Stored: describe(stored.Subject, stored.Header)}
	}
	if !bytes.Equal(stored.Data, msg.Data) {
		c.logger.WarnContext(ctx, "duplicate event stored with a different body (kept the stored one)", "msg_id", id,
			"subject", msg.Subject, "stream", ack.Stream, "stream_seq", ack.Sequence)
	}
	return nil
}

// storedMsg reads the message at seq of stream with one
// $JS.API.STREAM.MSG.GET request (jetstream.ErrMsgNotFound when there is
// none).
func (c *Client) storedMsg(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return c.getMsg(ctx, stream, struct {
		Seq uint64 `json:"seq"`
	}{seq})
}

// lastMsg reads the last message of stream on subject (a filter: it may
// hold wildcards) with one $JS.API.STREAM.MSG.GET request
// (jetstream.ErrMsgNotFound when there is none).
func (c *Client) lastMsg(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return c.getMsg(ctx, stream, struct {
		LastBySubj string `json:"last_by_subj"`
	}{subject})
}

// getMsg sends one $JS.API.STREAM.MSG.GET request for stream with body r.
func (c *Client) getMsg(ctx context.Context, stream string, r any) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := WithRequestTimeout(ctx)
	defer cancel()
	req, _ := json.Marshal(r)
	reply, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the stored message: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	out := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data,
		Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		h, err := decodeHeaders(resp.Message.Header)
		if err != nil {
			return nil, err
		}
		out.Header = h
	}
	return out, nil
}

// decodeHeaders parses a NATS/1.0 header block (as a stored message's
// "hdrs" holds it).
func decodeHeaders(b []byte) (nats.Header, error) {
	lines := bytes.Split(b, []byte("\r\n"))
	if len(lines) == 0 || !bytes.HasPrefix(lines[0], []byte("NATS/1.0")) {
		return nil, fmt.Errorf("decoding the stored message's headers: no NATS/1.0 line")
	}
	h := nats.Header{}
	for _, l := range lines[1:] {
		if len(l) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		h.Add(string(bytes.TrimSpace(k)), string(bytes.TrimSpace(v)))
	}
	return h, nil
}

package bus

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// PublishFenced stores the event unless a message on ends that ended
// accepts is stored, before its read or between its read and its publish.
func TestPublishFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	fence, done := "parley.chat.th.turn.>", "parley.chat.th.turn.completed"
	subject := "parley.chat.th.progress"
	n := 0
	publish := func(ended func(*jetstream.RawStreamMsg) bool) bool {
		t.Helper()
		n++
		ev, err := events.KindProgress.New(events.SourceAgent, events.DerivedID("progress", "fenced", string(rune('a'+n))), "th",
			schema.Progress{ProgressToken: schema.StringToken("turn"), Progress: float64(n)})
		if err != nil {
			t.Fatal(err)
		}
		var failed error
		select {
		case <-e.c.PublishFenced(ctx, events.StreamChat, subject, ev, fence, []string{done}, ended, 5*time.Second,
			func(err error) { failed = err }):
		case <-time.After(10 * time.Second):
			t.Fatal("PublishFenced never settled")
		}
		if failed != nil {
			t.Fatalf("PublishFenced: %v", failed)
		}
		m, err := e.c.lastMsg(ctx, events.StreamChat, subject)
		if err != nil {
			return false
		}
		got, _ := events.Decode(events.Header(m.Header), m.Data)
		return got != nil && got.ID() == ev.ID()
	}
	never := func(*jetstream.RawStreamMsg) bool { return false }
	always := func(*jetstream.RawStreamMsg) bool { return true }

	if !publish(always) {
		t.Error("nothing on ends yet: not stored")
	}
	if _, err := e.js.Publish(ctx, "parley.chat.th.turn.requested", nil); err != nil {
		t.Fatal(err)
	}
	if !publish(always) {
		t.Error("a message on the fence that is not on ends: not stored")
	}
	if _, err := e.js.Publish(ctx, done, nil); err != nil {
		t.Fatal(err)
	}
	if !publish(never) {
		t.Error("an end ended does not accept: not stored")
	}
	if publish(always) {
		t.Error("stored after an end ended accepts")
	}
	// An end stored after the reads, before the publish: the fence
	// refuses the publish, the next attempt reads the end.
	var calls atomic.Int32
	racing := func(*jetstream.RawStreamMsg) bool {
		if calls.Add(1) == 1 {
			if _, err := e.js.Publish(ctx, done, []byte("racing")); err != nil {
				t.Error(err)
			}
			return false
		}
		return true
	}
	if publish(racing) {
		t.Error("stored after an end stored between its read and its publish")
	}
	if calls.Load() != 2 {
		t.Errorf("ended called %d times, want 2 (a second attempt after the fence refused)", calls.Load())
	}
}

package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A raw consumer takes messages that are not CloudEvents (a KV bucket's
// entries and expiry markers) through the same loop: the handler reads
// the message (Delivery.Event is nil), only headers when asked, from the
// stream's end when asked; one it cannot handle is dead-lettered with the
// reason, not dropped.
func TestConsumeRaw(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	kv, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "raw", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "before", []byte("old")); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Delivery, 10)
	spec := ConsumerSpec{Stream: "KV_raw", Durable: "raw", FilterSubjects: []string{"$KV.raw.>"},
		Raw: true, HeadersOnly: true, DeliverNew: true, MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond},
		Description: "test: raw"}
	e.consume(t, spec, func(_ context.Context, d *Delivery) error {
		got <- d
		if string(d.Msg.Data()) != "" {
			return Permanent(errors.New("a headers-only consumer got a body"))
		}
		if d.Subject == "$KV.raw.poison" {
			return errors.New("cannot handle it")
		}
		return nil
	})
	waitFor(t, 5*time.Second, "the consumer", func() bool { return e.consumerInfo(t, "KV_raw", "raw").Name == "raw" })
	if _, err := kv.Put(ctx, "k1", []byte("value")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d.Event != nil || d.Subject != "$KV.raw.k1" || d.Msg.Headers().Get("Nats-Msg-Size") != "5" {
			t.Fatalf("delivery %+v (headers %v), want the raw write of k1, headers only", d, d.Msg.Headers())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery of the write (or the entry written before the consumer came first)")
	}
	info := e.consumerInfo(t, "KV_raw", "raw").Config
	if !info.HeadersOnly || info.DeliverPolicy != jetstream.DeliverNewPolicy || info.Description != "test: raw" {
		t.Errorf("consumer config %+v, want headers only, deliver new, the description", info)
	}
	if _, err := kv.Put(ctx, "poison", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, dl := e.deadLetter(t, "KV_raw", "raw")
	if dl.Subject != "$KV.raw.poison" || dl.Reason != "cannot handle it" || dl.NumDelivered != 2 {
		t.Errorf("dead letter %+v, want the poison entry after 2 deliveries with the reason", dl)
	}
}

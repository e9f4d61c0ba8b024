package kvstate

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A scheduled bucket's expiring value is readable until its expiry, then
// gone, and its expiry is stored under ExpiredKey (headers naming the
// value's subject), a subject a watcher of the value's key does not
// match; a key is written once. Reopening with another configuration
// keeps the schedules on (jetstream.UpdateKeyValue would turn them off,
// which the server refuses).
func TestScheduledBucket(t *testing.T) {
	js := newJS(t)
	b := openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true, TTL: time.Hour})
	if !b.Scheduled() {
		t.Fatal("Scheduled() = false on a 2.15 server")
	}
	ctx := t.Context()
	fires, err := js.CreateOrUpdateConsumer(ctx, "KV_sched", jetstream.ConsumerConfig{
		FilterSubject: "$KV.sched.*.*.expired", HeadersOnly: true, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	writes, err := js.CreateOrUpdateConsumer(ctx, "KV_sched", jetstream.ConsumerConfig{
		FilterSubject: "$KV.sched.*.*", HeadersOnly: true, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.CreateNewUntil(ctx, "t.1", rec{N: 1}, start.Add(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateNewUntil(ctx, "t.1", rec{N: 2}, start.Add(time.Hour)); !errors.Is(err, ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	if v, _, err := b.Get(ctx, "t.1"); err != nil || v.N != 1 {
		t.Fatalf("Get = %+v, %v", v, err)
	}
	msgs, err := fires.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range msgs.Messages() {
		n++
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("expired after %v, before its time (1.5 s)", took)
		}
		if m.Subject() != "$KV.sched."+ExpiredKey("t.1") || m.Headers().Get(SchedulerHeader) != "$KV.sched.t.1" {
			t.Errorf("expiry on %s with %s %q", m.Subject(), SchedulerHeader, m.Headers().Get(SchedulerHeader))
		}
		// Empty (the value is not stored twice), and kept ExpiryKeep.
		if size, ttl := m.Headers().Get("Nats-Msg-Size"), m.Headers().Get(jetstream.MsgTTLHeader); size != "0" || ttl != ExpiryKeep.String() {
			t.Errorf("expiry of %s bytes kept %q, want 0 bytes kept %v", size, ttl, ExpiryKeep)
		}
	}
	if n != 1 {
		t.Fatalf("%d expiries, want 1", n)
	}
	if _, _, err := b.Get(ctx, "t.1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after the expiry: %v, want ErrNotFound", err)
	}
	if msgs, err := writes.FetchNoWait(10); err == nil {
		for m := range msgs.Messages() {
			t.Errorf("a watcher of the keys was delivered %s", m.Subject())
		}
	}
	if _, err := b.CreateNewUntil(ctx, "t.2", rec{N: 1}, time.Now().Add(-time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("create past its expiry: %v, want ErrExpired", err)
	}

	b2 := openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true, TTL: 2 * time.Hour})
	st, err := b2.KV().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 2*time.Hour || !b2.Scheduled() {
		t.Errorf("reopened: TTL %v, scheduled %v; want 2h, true", st.TTL(), b2.Scheduled())
	}
	if b3 := openRec(t, js, "plain", BucketOptions{PerKeyTTL: true}); b3.Scheduled() {
		t.Error("a bucket without Schedules is scheduled")
	}
}

// The expiry a schedule stores is itself removed by its Nats-TTL
// (ExpiryKeep), and the bucket has expiry markers on: the server then
// stores a MaxAge marker on the expiry's subject, which a consumer of the
// ExpiredKey subjects is delivered too (so such a consumer must tell the
// two apart: the expiry carries SchedulerHeader, the marker does not).
// Here with a keep of 1 s instead of ExpiryKeep.
func TestScheduledExpiryLeavesAMarker(t *testing.T) {
	js := newJS(t)
	openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true})
	ctx := t.Context()
	c, err := js.CreateOrUpdateConsumer(ctx, "KV_sched", jetstream.ConsumerConfig{
		FilterSubject: "$KV.sched.*.*.pause.expired", HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	opts := ScheduleOpts("sched", "t.1.pause", time.Now().Add(500*time.Millisecond))
	opts = append(opts, jetstream.WithScheduleTTL(time.Second)) // overrides ExpiryKeep
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV.sched.t.1.pause", Data: []byte(`{"n":1}`)}, opts...); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(6 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		msgs, err := c.Fetch(2, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range msgs.Messages() {
			h := m.Headers()
			got = append(got, fmt.Sprintf("%s scheduler=%q marker=%q", m.Subject(), h.Get(SchedulerHeader), h.Get(jetstream.MarkerReasonHeader)))
		}
	}
	want := []string{
		`$KV.sched.t.1.pause.expired scheduler="$KV.sched.t.1.pause" marker=""`,
		`$KV.sched.t.1.pause.expired scheduler="" marker="MaxAge"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("delivered %q, want %q", got, want)
	}
}

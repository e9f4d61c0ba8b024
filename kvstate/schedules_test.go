package kvstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A scheduled bucket's expiring value is readable until its expiry, then
// gone, and its expiry is stored under its ExpiryKey (an empty value
// whose header names the value), a subject a watcher of the value keys
// does not match; a key is written once. Expiries sharing a key keep only
// the latest. Reopening with another configuration keeps the schedules on
// (jetstream.UpdateKeyValue would turn them off, which the server
// refuses).
func TestScheduledBucket(t *testing.T) {
	js := newJS(t)
	thread := func(key string) string { k, _, _ := strings.Cut(key, "."); return k + ".x.expired" }
	b := openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true, TTL: time.Hour, ExpiryKey: thread})
	if !b.Scheduled() {
		t.Fatal("Scheduled() = false on a 2.15 server")
	}
	ctx := t.Context()
	fires, err := js.CreateOrUpdateConsumer(ctx, "KV_sched", jetstream.ConsumerConfig{
		FilterSubject: "$KV.sched.*.x.expired", HeadersOnly: true, DeliverPolicy: jetstream.DeliverNewPolicy})
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
	if _, err := b.CreateNewUntil(ctx, "t.2", rec{N: 2}, start.Add(2500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateNewUntil(ctx, "t.1", rec{N: 2}, start.Add(time.Hour)); !errors.Is(err, ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	if v, _, err := b.Get(ctx, "t.1"); err != nil || v.N != 1 {
		t.Fatalf("Get = %+v, %v", v, err)
	}
	msgs, err := fires.Fetch(2, jetstream.FetchMaxWait(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range msgs.Messages() {
		key, ok := ExpiredValueKey("sched", m.Headers())
		if !ok || m.Subject() != "$KV.sched.t.x.expired" {
			t.Errorf("expiry on %s naming %q", m.Subject(), m.Headers().Get(SchedulerHeader))
		}
		got = append(got, key)
		if took, until := time.Since(start), map[string]time.Duration{"t.1": 1500 * time.Millisecond, "t.2": 2500 * time.Millisecond}[key]; took < until {
			t.Errorf("%s expired after %v, before its time (%v)", key, took, until)
		}
		// Empty (the value is not stored twice), and kept ExpiryKeep.
		if size, ttl := m.Headers().Get("Nats-Msg-Size"), m.Headers().Get(jetstream.MsgTTLHeader); size != "0" || ttl != ExpiryKeep.String() {
			t.Errorf("expiry of %s bytes kept %q, want 0 bytes kept %v", size, ttl, ExpiryKeep)
		}
	}
	if strings.Join(got, " ") != "t.1 t.2" {
		t.Fatalf("expiries of %v, want t.1 then t.2", got)
	}
	for _, k := range []string{"t.1", "t.2"} {
		if _, _, err := b.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get %s after its expiry: %v, want ErrNotFound", k, err)
		}
	}
	// One expiry kept for the shared key; nothing else on its subject (a
	// replaced expiry leaves no marker).
	st, err := js.Stream(ctx, "KV_sched")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV.sched.t.x.expired"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["$KV.sched.t.x.expired"]; n != 1 {
		t.Errorf("%d messages kept on the shared expiry key, want 1", n)
	}
	if more, err := fires.FetchNoWait(10); err == nil {
		for m := range more.Messages() {
			t.Errorf("a further message on the expiry key: %v", m.Headers())
		}
	}
	if msgs, err := writes.FetchNoWait(10); err == nil {
		for m := range msgs.Messages() {
			t.Errorf("a watcher of the keys was delivered %s", m.Subject())
		}
	}
	if _, err := b.CreateNewUntil(ctx, "t.3", rec{N: 1}, time.Now().Add(-time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("create past its expiry: %v, want ErrExpired", err)
	}

	b2 := openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true, TTL: 2 * time.Hour})
	st2, err := b2.KV().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st2.TTL() != 2*time.Hour || !b2.Scheduled() {
		t.Errorf("reopened: TTL %v, scheduled %v; want 2h, true", st2.TTL(), b2.Scheduled())
	}
	if b3 := openRec(t, js, "plain", BucketOptions{PerKeyTTL: true}); b3.Scheduled() {
		t.Error("a bucket without Schedules is scheduled")
	}
}

// An expiry is kept ExpiryKeep (its Nats-TTL) in a bucket with expiry
// markers on, so when it goes the server stores a MaxAge marker on its
// key, which a consumer of the expiries is delivered (with no
// SchedulerHeader: ExpiredValueKey says it is no value's expiry). Values
// that share an expiry key leave one marker, not one each: a later
// expiry replaces the earlier one (rollup), and a replaced expiry leaves
// none. (Checked with a 2 s keep instead of 24 h.)
func TestScheduledExpiriesLeaveOneMarkerPerKey(t *testing.T) {
	js := newJS(t)
	openRec(t, js, "sched", BucketOptions{PerKeyTTL: true, Schedules: true})
	ctx := t.Context()
	c, err := js.CreateOrUpdateConsumer(ctx, "KV_sched", jetstream.ConsumerConfig{
		FilterSubject: "$KV.sched.*.x.expired", HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, key := range []string{"t.1", "t.2"} {
		opts := ScheduleOpts("sched", "t.x.expired", start.Add(time.Duration(i+1)*time.Second))
		opts = append(opts, jetstream.WithScheduleTTL(2*time.Second)) // overrides ExpiryKeep
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV.sched." + key, Data: []byte(`{"n":1}`)}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	// Three by 4 s (the marker 2 s after the second expiry); a fourth
	// would come by then too.
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && (len(got) < 3 || time.Since(start) < 5*time.Second); {
		msgs, err := c.Fetch(4, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range msgs.Messages() {
			key, ok := ExpiredValueKey("sched", m.Headers())
			got = append(got, fmt.Sprintf("%s %q %v marker=%q", m.Subject(), key, ok, m.Headers().Get(jetstream.MarkerReasonHeader)))
		}
	}
	want := []string{
		`$KV.sched.t.x.expired "t.1" true marker=""`,
		`$KV.sched.t.x.expired "t.2" true marker=""`,
		`$KV.sched.t.x.expired "" false marker="MaxAge"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("delivered %q, want %q", got, want)
	}
}

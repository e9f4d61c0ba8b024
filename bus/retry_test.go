package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/events"
)

var fastRetry = RetryPolicy{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func TestRetryUntilSuccess(t *testing.T) {
	t.Parallel()
	tries := 0
	p := fastRetry
	p.Timeout = 5 * time.Second
	err := Retry(t.Context(), "flaky", p, func(context.Context) error {
		tries++
		if tries < 4 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Errorf("Retry = %v after %d tries, want nil after 4", err, tries)
	}
}

func TestRetryStopsOnFinalErrors(t *testing.T) {
	t.Parallel()
	for _, final := range []error{
		Permanent(errors.New("stream PARLEY_CHAT: storage is Memory on the server")),
		&jetstream.APIError{Code: 500, ErrorCode: 10074, Description: "replicas > 1 not supported in non-clustered mode"},
		&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"},
		fmt.Errorf("opening: %w", jetstream.ErrInvalidBucketName),
		nats.ErrAuthorization,
	} {
		tries := 0
		p := fastRetry
		err := Retry(t.Context(), "step", p, func(context.Context) error { tries++; return final })
		if tries != 1 || err == nil || !strings.Contains(err.Error(), "step") {
			t.Errorf("Retry(%v) = %v after %d tries, want the error, named, after 1 try", final, err, tries)
		}
	}
}

func TestRetryRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	for _, transient := range []error{
		nats.ErrNoResponders, context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoServers,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"},
		fmt.Errorf("wrapped: %w", jetstream.ErrStreamNameAlreadyInUse),
	} {
		if !IsRetryable(transient) {
			t.Errorf("IsRetryable(%v) = false, want true", transient)
		}
	}
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	p := fastRetry
	p.Timeout = 200 * time.Millisecond
	start := time.Now()
	tries := 0
	err := Retry(t.Context(), "creating stream X", p, func(context.Context) error { tries++; return nats.ErrTimeout })
	var re *RetryError
	if !errors.As(err, &re) || !errors.Is(err, nats.ErrTimeout) || re.Tries != tries || tries < 3 {
		t.Fatalf("Retry = %v (%d tries), want a *RetryError wrapping the last error after several tries", err, tries)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Retry took %v with a 200ms budget", el)
	}
	if !strings.Contains(err.Error(), "creating stream X: gave up after") {
		t.Errorf("error %q does not say what gave up", err)
	}
}

func TestRetryHonoursCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	p := RetryPolicy{Timeout: time.Minute, InitialBackoff: 10 * time.Millisecond}
	err := Retry(ctx, "x", p, func(context.Context) error { return nats.ErrTimeout })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Retry after cancel = %v, want context.Canceled", err)
	}
}

func TestStartupPolicyFromContext(t *testing.T) {
	t.Parallel()
	def := RetryPolicy{Timeout: time.Minute}
	if got := StartupPolicy(t.Context(), def); got.Timeout != time.Minute {
		t.Errorf("StartupPolicy without a value = %v, want the default", got.Timeout)
	}
	ctx := WithStartupPolicy(t.Context(), RetryPolicy{Timeout: 3 * time.Second})
	if got := StartupPolicy(ctx, def); got.Timeout != 3*time.Second {
		t.Errorf("StartupPolicy = %v, want 3s", got.Timeout)
	}
}

// A publish while the stream has no leader (here: no stream yet, the same
// "no responders" answer) is resent with the same Nats-Msg-Id until the
// stream answers, and stored once.
func TestPublishRetriesUntilStreamAnswers(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	c, err := New(nc, &Options{Storage: jetstream.MemoryStorage, PublishRetry: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := runRequested(t, "run-late")
	go func() {
		time.Sleep(700 * time.Millisecond)
		_ = c.EnsureStreams(context.Background())
	}()
	ack, err := c.Publish(t.Context(), events.SubjectRunRequested, e)
	if err != nil {
		t.Fatalf("Publish while the stream appears = %v, want success after retries", err)
	}
	// A second publish of the same event is a duplicate, not a copy.
	ack2, err := c.Publish(t.Context(), events.SubjectRunRequested, e)
	if err != nil || !ack2.Duplicate {
		t.Errorf("republish = %+v, %v, want a duplicate", ack2, err)
	}
	s, err := js.Stream(t.Context(), ack.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}

// When the budget runs out the error says so and wraps the last failure.
func TestPublishRetryBudgetRunsOut(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, _ := srv.JetStream(t)
	c, err := New(nc, &Options{PublishRetry: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Publish(t.Context(), "parley.nowhere", runRequested(t, "r"))
	var re *RetryError
	if !errors.As(err, &re) || re.Tries < 2 || !(errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("Publish with no stream = %v, want a *RetryError after several tries wrapping no responders or a timeout", err)
	}
	if !strings.Contains(err.Error(), "may or may not be stored") {
		t.Errorf("error %q does not say the outcome is unknown", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Publish took %v with a 2s budget", el)
	}
	// Negative: one try.
	c1, _ := New(nc, &Options{PublishRetry: -1})
	if _, err := c1.Publish(t.Context(), "parley.nowhere", runRequested(t, "r")); !errors.As(err, &re) || re.Tries != 1 {
		t.Errorf("Publish with PublishRetry < 0 = %v, want one try", err)
	}
}

// A full work queue (DiscardNew at its limit) answers 503 like an
// election: the publish is retried within the budget, and then the error
// says the event was not stored, not that its fate is unknown.
func TestPublishStreamFullSaysNotStored(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "FULL", Subjects: []string{"parley.full"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	c, err := New(nc, &Options{PublishRetry: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(t.Context(), "parley.full", runRequested(t, "r1")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(t.Context(), "parley.full", runRequested(t, "r2"))
	var re *RetryError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "was not stored") || strings.Contains(err.Error(), "may or may not") {
		t.Fatalf("Publish to a full stream = %v, want a *RetryError saying it was not stored", err)
	}
	if !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Errorf("error %q does not name the limit", err)
	}
}

// A stream the server holds with other storage cannot be updated in
// place: EnsureStreams fails at once naming the stream and the field.
func TestEnsureStreamsStorageMismatch(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: events.StreamChat,
		Subjects: []string{events.SubjectChatAll}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	c, _ := New(nc, &Options{Storage: jetstream.FileStorage})
	start := time.Now()
	err := c.EnsureStreams(t.Context())
	if err == nil || !strings.Contains(err.Error(), "PARLEY_CHAT") || !strings.Contains(err.Error(), "storage") || !IsPermanent(err) {
		t.Fatalf("EnsureStreams = %v, want a permanent error naming PARLEY_CHAT and storage", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("a permanent mismatch took %v (retried?)", el)
	}
}

// A stream that differs in a field JetStream can update is updated; one
// with the same configuration is left alone (the create succeeds).
func TestEnsureStreamsUpdatesDifferences(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, js := srv.JetStream(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: events.StreamChat,
		Subjects: []string{events.SubjectChatAll}, Storage: jetstream.FileStorage, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c, _ := New(nc, nil)
	for range 2 {
		if err := c.EnsureStreams(t.Context()); err != nil {
			t.Fatalf("EnsureStreams = %v", err)
		}
	}
	s, err := js.Stream(t.Context(), events.StreamChat)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 7*24*time.Hour {
		t.Errorf("PARLEY_CHAT MaxAge = %v, want it updated to 168h", got)
	}
}

func TestEnsureConsumerImmutableField(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.js.CreateConsumer(t.Context(), events.StreamChat, jetstream.ConsumerConfig{
		Durable: "c1", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.EnsureConsumer(t.Context(), ConsumerSpec{Stream: events.StreamChat, Durable: "c1"})
	if err == nil || !strings.Contains(err.Error(), "deliver_policy") || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("EnsureConsumer = %v, want an error naming c1 and deliver_policy", err)
	}
	// A changeable difference is updated.
	if _, err := e.c.EnsureConsumer(t.Context(), ConsumerSpec{Stream: events.StreamChat, Durable: "c2", AckWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	cons, err := e.c.EnsureConsumer(t.Context(), ConsumerSpec{Stream: events.StreamChat, Durable: "c2", AckWait: 9 * time.Second})
	if err != nil || cons.CachedInfo().Config.AckWait != 9*time.Second {
		t.Fatalf("EnsureConsumer(changed AckWait) = %v, want AckWait updated to 9s", err)
	}
}

// Replicas 3 on a server that is not clustered is a configuration error
// reported at once, not retried for the start-up budget.
func TestEnsureStreamsReplicasOnSingleServer(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc, _ := srv.JetStream(t)
	c, _ := New(nc, &Options{Replicas: 3, Storage: jetstream.MemoryStorage})
	start := time.Now()
	err := c.EnsureStreams(t.Context())
	if err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("EnsureStreams(R3 on one server) = %v, want the replicas error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v (retried?)", el)
	}
}

// Two replicas of each of four roles creating parley's streams (R3) and
// their consumers at the same moment on a fresh 3-node cluster all succeed
// (concurrent create-or-update of an R3 stream timed out and
// start-up never retried).
func TestEnsureConcurrentOnFreshCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	cl := bustest.NewCluster(t, 3)
	specs := []ConsumerSpec{
		{Stream: events.StreamChat, Durable: "processor"}, {Stream: events.StreamRuns, Durable: "processor-runs"},
		{Stream: events.StreamAgent, Durable: "agent"}, {Stream: events.StreamTools, Durable: "toolexec"},
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		nc := cl.Connect(t)
		c, err := New(nc, &Options{Replicas: 3, StartupTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			if err := c.EnsureStreams(t.Context()); err != nil {
				errs <- fmt.Errorf("replica %d: %w", i, err)
				return
			}
			if _, err := c.EnsureConsumer(t.Context(), specs[i%len(specs)]); err != nil {
				errs <- fmt.Errorf("replica %d: %w", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, js := cl.JetStream(t)
	for _, name := range []string{events.StreamChat, events.StreamAgent, events.StreamRuns, events.StreamTools, events.StreamDeadLetter} {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
}

func TestNotVisibleYetIsRetryable(t *testing.T) {
	t.Parallel()
	nf := &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}
	if IsRetryable(nf) {
		t.Error("a plain stream not found is retryable")
	}
	if err := NotVisibleYet(fmt.Errorf("x: %w", nf)); !IsRetryable(err) || !strings.Contains(err.Error(), "stream not found") {
		t.Errorf("NotVisibleYet(stream not found) = %v, retryable %v; want a retryable error saying why", err, IsRetryable(err))
	}
	other := errors.New("boom")
	if NotVisibleYet(other) != other {
		t.Error("NotVisibleYet changed another error")
	}
}

// A replica whose first pull is refused ("no responders": a consumer just
// created on a cluster has no leader yet) sends it again within seconds. With
// nats.go's default 30 s pulls and 15 s heartbeats the replica sat idle for
// 30 s (TestCluster's logs); the same holds for a pull lost with a node.
func TestConsumeRepullsSoonAfterALostPull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	cl := bustest.NewCluster(t, 3)
	var worst time.Duration
	// The refused first pull is a race (the consumer's leader election
	// against the first pull): 8 rounds make it likely to happen.
	for i := range 8 {
		w, err := New(cl.Connect(t), &Options{Replicas: 3, Storage: jetstream.MemoryStorage})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := w.EnsureStreams(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		// A fresh consumer each round, consumed at once.
		thread := fmt.Sprintf("t%d", i)
		spec := ConsumerSpec{Stream: events.StreamChat, Durable: "c-" + thread,
			FilterSubjects: []string{events.ChatThreadSubjects(thread)}}
		got := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			_ = w.Consume(ctx, spec, func(context.Context, *Delivery) error {
				select {
				case got <- struct{}{}:
				default:
				}
				return nil
			})
		}()
		start := time.Now()
		if _, err := w.Publish(t.Context(), events.ChatSubject(thread, events.ChatTurnRequested), runRequested(t, thread)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			worst = max(worst, time.Since(start))
		case <-time.After(12 * time.Second):
			t.Fatalf("round %d: nothing consumed within 12 s of publishing", i)
		}
		cancel()
	}
	t.Logf("slowest first delivery: %v", worst.Round(time.Millisecond))
}

// Start-up steps share one deadline: a step that starts after it gets one
// try, a step before it no more than the time left.
func TestRetrySharedDeadline(t *testing.T) {
	t.Parallel()
	p := fastRetry
	p.Timeout = time.Minute
	p.Deadline = time.Now().Add(-time.Second)
	tries := 0
	err := Retry(t.Context(), "late step", p, func(context.Context) error { tries++; return nats.ErrTimeout })
	var re *RetryError
	if !errors.As(err, &re) || tries != 1 {
		t.Errorf("Retry after the deadline = %v after %d tries, want a *RetryError after 1", err, tries)
	}
	p.Deadline = time.Now().Add(300 * time.Millisecond)
	start := time.Now()
	_ = Retry(t.Context(), "step", p, func(context.Context) error { return nats.ErrTimeout })
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Retry ran %v past a deadline 300ms away (its Timeout is 1m)", el)
	}
}

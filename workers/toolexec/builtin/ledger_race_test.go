package builtin

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
)

// staleLedgerKV is a bucket whose first ledger read is answered before a
// concurrent execution records the call and returned only after that
// execution has applied its effect: the interleaving in which the late
// execution plans against a site the first one already changed.
type staleLedgerKV struct {
	jetstream.KeyValue
	read    chan struct{} // closed when the stale read was made
	release chan struct{} // closed when the late execution may go on
	done    bool
}

func (kv *staleLedgerKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := kv.KeyValue.Get(ctx, key)
	if strings.HasPrefix(key, ledgerPrefix) && !kv.done {
		kv.done = true
		close(kv.read)
		<-kv.release
	}
	return e, err
}

// TestLateExecutionReplaysLedger: an execution that read "no ledger
// record" before a concurrent execution of the same call recorded it, and
// planned after that execution deleted the drafts, returns the recorded
// result ("Deleted 10 entities"), not "no entity has the ID ...".
func TestLateExecutionReplaysLedger(t *testing.T) {
	s, js := newSite(t)
	drafts := draftIDs(t, s)
	req := Request{CallID: "call_race", Arguments: args(map[string]any{"ids": drafts})}

	stale := &staleLedgerKV{KeyValue: s.kv, read: make(chan struct{}), release: make(chan struct{})}
	late := siteOver(js, stale, s.baseURL)
	type outcome struct {
		r   Result
		err error
	}
	lateDone := make(chan outcome, 1)
	go func() {
		tool, _ := late.Tool(ToolDeleteEntities)
		r, err := tool.Call(t.Context(), req)
		lateDone <- outcome{r, err}
	}()
	<-stale.read
	first := callOK(t, s, ToolDeleteEntities, req)
	close(stale.release)
	got := <-lateDone
	if got.err != nil {
		t.Fatalf("late execution: %v", got.err)
	}
	if got.r.Call == nil {
		t.Fatalf("late execution returned no tool result: %+v", got.r)
	}
	if diff := cmp.Diff(first, got.r.Call); diff != "" {
		t.Errorf("late execution result differs from the recorded one (-first +late):\n%s", diff)
	}
	assertLedger(t, s, map[string][]string{"call_race": drafts})
}

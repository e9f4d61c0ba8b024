package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/kvstate"
)

// diagnose describes, for a thread that did not finish, what the bus
// holds for it: its input messages in PARLEY_INPUT (the processor's work
// queue), the processor's consumers (pending, ack floor, redeliveries)
// and its thread record, so a lost turn can be placed: never stored,
// stored but not delivered, delivered but not acknowledged, or handled
// into a state that waits.
func diagnose(js jetstream.JetStream, thread string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	s, err := js.Stream(ctx, events.StreamInput)
	if err != nil {
		return fmt.Sprintf("    %s: %v\n", events.StreamInput, err)
	}
	subject := "parley.in.*." + thread + ".>"
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			if err != jetstream.ErrMsgNotFound {
				fmt.Fprintf(&b, "    input get after %d: %v\n", seq, err)
			}
			break
		}
		data := string(m.Data)
		if i := strings.Index(data, `"text":`); i >= 0 {
			data = data[i:min(len(data), i+60)]
		} else {
			data = data[:min(len(data), 60)]
		}
		fmt.Fprintf(&b, "    input seq %d %s %s id=%s %s\n", m.Sequence, m.Time.Format("15:04:05.000"),
			m.Subject, m.Header.Get("Nats-Msg-Id"), data)
		seq = m.Sequence + 1
	}
	// Every consumer of parley's streams with work outstanding.
	for _, stream := range []string{events.StreamInput, events.StreamRuns, events.StreamAgent, events.StreamTools} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			fmt.Fprintf(&b, "    stream %s: %v\n", stream, err)
			continue
		}
		for ci := range st.ListConsumers(ctx).Info() {
			leader := ""
			if ci.Cluster != nil {
				leader = ci.Cluster.Leader
			}
			fmt.Fprintf(&b, "    consumer %s/%s: leader %s delivered stream %d, ack floor stream %d, ack pending %d, redelivered %d, pending %d, waiting pulls %d\n",
				stream, ci.Name, leader, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumAckPending, ci.NumRedelivered, ci.NumPending, ci.NumWaiting)
		}
	}
	if kv, err := js.KeyValue(ctx, kvstate.BucketThreads); err != nil {
		fmt.Fprintf(&b, "    %s: %v\n", kvstate.BucketThreads, err)
	} else if e, err := kv.Get(ctx, thread); err != nil {
		fmt.Fprintf(&b, "    thread record: %v\n", err)
	} else {
		var rec map[string]any
		_ = json.Unmarshal(e.Value(), &rec)
		delete(rec, "history")
		delete(rec, "shared")
		if q, ok := rec["queue"].([]any); ok {
			ids := make([]any, 0, len(q))
			for _, m := range q {
				if m, ok := m.(map[string]any); ok {
					ids = append(ids, m["eventId"])
				}
			}
			rec["queue"] = ids
		}
		v, _ := json.Marshal(rec)
		fmt.Fprintf(&b, "    thread record rev %d: %s\n", e.Revision(), v)
	}
	return b.String()
}

// dumpStacks makes every worker print its goroutines into its log
// (SIGQUIT) and stop, so a failed run shows where a message is held;
// the supervisor does not restart them.
func (c *chaosRun) dumpStacks() {
	for _, w := range c.workers {
		w.mu.Lock()
		w.stopping = true
		cmd, exited := w.cmd, w.exited
		w.mu.Unlock()
		if cmd == nil || cmd.Process == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
	}
	c.t.Logf("workers sent SIGQUIT: their goroutines are at the end of their logs")
}

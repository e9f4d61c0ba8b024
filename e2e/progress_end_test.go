package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// waitTool is a read-only tool that takes {"ms": n} milliseconds.
type waitTool struct{}

func (waitTool) Definition() schema.Tool {
	ro := true
	return schema.Tool{Name: "wait", Description: "Waits ms milliseconds.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: &ro}}
}

func (waitTool) Call(ctx context.Context, req builtin.Request) (builtin.Result, error) {
	var a struct{ MS int }
	_ = json.Unmarshal(req.Arguments, &a)
	select {
	case <-time.After(time.Duration(a.MS) * time.Millisecond):
	case <-ctx.Done():
		return builtin.Result{}, ctx.Err()
	}
	return builtin.Result{Call: &schema.CallToolResult{Content: schema.ContentList{schema.Text("waited")}}}, nil
}

// waitSource serves waitTool as "timer__wait".
type waitSource struct{}

func (waitSource) Name() string             { return "timer" }
func (waitSource) Tools() []builtin.Tool    { return []builtin.Tool{waitTool{}} }
func (waitSource) Changed() <-chan struct{} { return nil }

// waitModel calls timer__wait with the milliseconds the user's message
// names ("wait 190"), then answers "done".
type waitModel struct{}

func (waitModel) Complete(_ context.Context, req model.Request) (model.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		return model.Response{Text: "done"}, nil
	}
	ms := strings.TrimPrefix(last.Text, "wait ")
	return model.Response{ToolCalls: []schema.ToolCall{{ID: "call-1", Name: "timer" + toolexec.Separator + "wait",
		Arguments: json.RawMessage(`{"ms":` + ms + `}`)}}}, nil
}

// progressAfterEnd counts, over threads, the progress events stored in a
// thread after the end (turn.completed) of the turn they belong to.
func progressAfterEnd(s *system, threads []string) (late, stored int, detail []string) {
	for _, th := range threads {
		ended := map[string]bool{}
		s.rec.mu.Lock()
		for _, e := range s.rec.events {
			if e.Subject() != th {
				continue
			}
			turn, _ := e.Extensions()[events.ExtTurnID].(string)
			switch events.TypeOf(e) {
			case events.TypeTurnCompleted, events.TypeTurnFailed:
				ended[turn] = true
			case events.TypeProgress:
				stored++
				if ended[turn] {
					late++
					detail = append(detail, th+": "+e.ID()+" "+string(e.Data()))
				}
			}
		}
		s.rec.mu.Unlock()
	}
	return late, stored, detail
}

// replayProgressEnd runs turns turns (threads in parallel, each turn a tool
// lasting just under or just over the agent's progress delay) with
// agents agent replicas and returns the number of progress events stored
// after their turn's end.
func replayProgressEnd(t *testing.T, agents, threads, turnsPerThread int) int {
	s := start(t, options{provider: waitModel{}, sources: []toolexec.Source{waitSource{}}})
	for range agents - 1 {
		s.startAgentIn(waitModel{})
	}
	d := agent.DefaultProgressDelay
	durations := []time.Duration{d - 30*time.Millisecond, d - 10*time.Millisecond, d - 2*time.Millisecond,
		d + 2*time.Millisecond, d + 10*time.Millisecond, d + 30*time.Millisecond}
	var names []string
	for i := range threads {
		names = append(names, fmt.Sprintf("pe%d", i))
	}
	var wg sync.WaitGroup
	for i, th := range names {
		wg.Go(func() {
			for n := range turnsPerThread {
				ms := durations[(i+n)%len(durations)].Milliseconds()
				if _, err := s.client.Send(s.ctx, th, "", fmt.Sprintf("wait %d", ms), ""); err != nil {
					t.Error(err)
					return
				}
				s.rec.await(t, 20*time.Second, th, events.TypeTurnCompleted, n+1)
			}
		})
	}
	wg.Wait()
	time.Sleep(d + 500*time.Millisecond) // a late progress has time to land
	late, stored, detail := progressAfterEnd(s, names)
	t.Logf("%d agent(s): %d of %d progress events stored after their turn's end in %d turns", agents, late, stored, threads*turnsPerThread)
	if stored < threads*turnsPerThread/4 {
		// Half the tools last longer than the delay: their progress
		// must still be stored.
		t.Errorf("only %d progress events stored in %d turns", stored, threads*turnsPerThread)
	}
	for i, l := range detail {
		if i == 5 {
			break
		}
		t.Logf("late: %s", l)
	}
	return late
}

// No progress of a turn is stored after its turn.completed, with tools
// that end just under and just over the progress delay, on one agent and
// on two agent replicas (a phase announced by one replica while the other
// ends the run).
func TestProgressNeverAfterTurnEnd(t *testing.T) {
	for _, agents := range []int{1, 2} {
		t.Run(fmt.Sprintf("agents=%d", agents), func(t *testing.T) {
			if late := replayProgressEnd(t, agents, 20, 10); late != 0 {
				t.Errorf("%d progress events stored after their turn's end", late)
			}
		})
	}
}

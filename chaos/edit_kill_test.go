package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
	"github.com/parley-dev/parley/workers/processor"
	"github.com/parley-dev/parley/workers/toolexec/builtin"
)

// An accept with edited arguments whose processor is killed right after
// consuming it (the thread record says resumed; neither the echo nor
// run.resumed is published: fault point after-resume, exit 70) is
// finished by its redelivery on another processor: the edited call runs
// once — the site's ledger deletes article-2 alone, once — and the turn
// completes once.
func TestEditedAnswerSurvivesProcessorKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes")
	}
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	dir := t.TempDir()
	srv := &natsServer{bin: bins.server, dir: filepath.Join(dir, "js"), log: filepath.Join(dir, "nats.log"), port: freePort(t)}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	type proc struct {
		cmd  *exec.Cmd
		done chan error
	}
	startRole := func(role, name string, env ...string) *proc {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bins.parley, role, "--nats", srv.url(), "--log-format", "json")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait(); logf.Close() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-p.done
		})
		return p
	}
	startRole("gate", "gate")
	startRole("toolexec", "toolexec")
	startRole("agent", "agent")
	once := filepath.Join(dir, "fault-once")
	proc1 := startRole("processor", "processor-1", processor.EnvFaultExit+"=after-resume", processor.EnvFaultOnce+"="+once)

	nc, err := client.Connect(srv.url(), "edit-kill-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := bus.New(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for b.EnsureStreams(ctx) != nil {
		time.Sleep(50 * time.Millisecond)
	}
	for {
		kv, err := b.JetStream().KeyValue(ctx, "parley_tools")
		if err == nil {
			if _, err := kv.Get(ctx, builtin.ToolDeleteEntities); err == nil {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl := client.New(b, "/test/edit-kill")
	items, err := cl.Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	const thread = "edit-kill"
	if _, err := cl.Send(ctx, thread, "", "delete the draft articles", ""); err != nil {
		t.Fatal(err)
	}
	next := func(typ events.Type) *events.TurnCompleted {
		t.Helper()
		for {
			select {
			case it, ok := <-items:
				if !ok {
					t.Fatal("watch closed")
				}
				if it.Event == nil || it.Event.Subject() != thread || events.TypeOf(it.Event) != typ {
					continue
				}
				switch typ {
				case events.TypeElicitationRequested:
					p, _ := events.Data[schema.ElicitRequestParams](it.Event)
					id, _ := p.Meta[schema.MetaElicitationID].(string)
					if _, err := cl.Answer(ctx, thread, id, schema.ElicitResult{Action: schema.ActionAccept,
						Meta: schema.Meta{schema.MetaArguments: json.RawMessage(`{"ids":["article-2"]}`)}}, ""); err != nil {
						t.Fatal(err)
					}
					return nil
				case events.TypeTurnCompleted:
					d, _ := events.Data[events.TurnCompleted](it.Event)
					return &d
				}
			case <-ctx.Done():
				t.Fatalf("no %s on %s (logs in %s)", typ, thread, dir)
			}
		}
	}
	next(events.TypeElicitationRequested)
	select {
	case err := <-proc1.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 70 {
			t.Fatalf("processor-1 exited %v, want the fault exit 70 after consuming the answer", err)
		}
		proc1.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("processor-1 did not exit at after-resume")
	}
	startRole("processor", "processor-2", processor.EnvFaultExit+"=after-resume", processor.EnvFaultOnce+"="+once)
	done := next(events.TypeTurnCompleted)

	site, err := builtin.OpenSite(ctx, b.JetStream(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := site.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var deletes [][]string
	for _, l := range ledger {
		if l.Tool == builtin.ToolDeleteEntities {
			deletes = append(deletes, l.IDs)
		}
	}
	if len(deletes) != 1 || !slices.Equal(deletes[0], []string{"article-2"}) {
		t.Fatalf("deletes %v, want the edit [article-2] once", deletes)
	}
	var edited bool
	for _, d := range done.Decisions {
		edited = edited || d.Edited
	}
	if !edited {
		t.Errorf("decisions %+v, want the delete marked edited", done.Decisions)
	}
	// The turn completed once: nothing more on the thread for a while.
	quiet := time.After(time.Second)
	for {
		select {
		case it := <-items:
			if it.Event != nil && it.Event.Subject() == thread && events.TypeOf(it.Event) == events.TypeTurnCompleted {
				t.Fatalf("a second turn.completed: %s", it.Event.Data())
			}
		case <-quiet:
			return
		}
	}
}

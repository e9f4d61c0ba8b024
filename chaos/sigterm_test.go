package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/client"
	"github.com/parley-dev/parley/events"
)

// SIGTERM drains: a processor and an agent that get SIGTERM while turns are
// in flight take no new work, exit 0, and lose nothing — a replacement
// started afterwards finishes every turn.
func TestSIGTERMDrains(t *testing.T) {
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
	startRole := func(role, name string) *proc {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bins.parley, role, "--nats", srv.url(), "--log-format", "json")
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
	terminate := func(p *proc, name string) {
		t.Helper()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("%s exited %d after SIGTERM, want 0 (log %s)", name, ee.ExitCode(), filepath.Join(dir, name+".log"))
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			p.done <- nil // for the cleanup
		case <-time.After(40 * time.Second):
			t.Fatalf("%s did not exit within 40s of SIGTERM", name)
		}
	}
	startRole("gate", "gate")
	startRole("toolexec", "toolexec")
	agent1 := startRole("agent", "agent-1")
	proc1 := startRole("processor", "processor-1")

	nc, err := client.Connect(srv.url(), "sigterm-test")
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
	for {
		if err := b.EnsureStreams(ctx); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl := client.New(b, "/test/sigterm")
	items, err := cl.Watch(ctx, client.WatchOptions{FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the tool registry, then load the workers.
	for {
		kv, err := b.JetStream().KeyValue(ctx, "parley_tools")
		if err == nil {
			if _, err := kv.Get(ctx, "list_entities"); err == nil {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	const turns = 60
	want := map[string]bool{}
	for i := range turns {
		e, err := cl.Send(ctx, fmt.Sprintf("drain-%d", i%20), "", "list everything", "")
		if err != nil {
			t.Fatal(err)
		}
		want[events.DerivedID("turn", e.ID())] = true
	}
	completed := map[string]bool{}
	waitCompleted := func(n int) {
		t.Helper()
		for len(completed) < n {
			select {
			case it, ok := <-items:
				if !ok {
					t.Fatal("watch closed")
				}
				if it.Event != nil && events.TypeOf(it.Event) == events.TypeTurnCompleted {
					d, _ := events.Data[events.TurnCompleted](it.Event)
					if want[d.TurnID] {
						completed[d.TurnID] = true
					}
				}
			case <-ctx.Done():
				t.Fatalf("%d of %d turns completed", len(completed), n)
			}
		}
	}
	waitCompleted(3) // turns are in flight now
	terminate(proc1, "processor-1")
	terminate(agent1, "agent-1")
	startRole("agent", "agent-2")
	startRole("processor", "processor-2")
	waitCompleted(turns)
}

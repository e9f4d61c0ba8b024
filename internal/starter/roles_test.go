package starter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/workers/agent"
	"github.com/parley-dev/parley/workers/gate"
	"github.com/parley-dev/parley/workers/processor"
)

// The four constructors start on a real server, each on its own
// connection, report their start-up, serve (the gate answers discovery),
// and stop cleanly.
func TestRolesStartAndStopCleanly(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	connect := func(_ context.Context, name, _ string) (*nats.Conn, error) {
		return nats.Connect(srv.ClientURL(), nats.Name(name))
	}
	started := make(chan string, 4)
	c := Common{Bus: bus.Options{StartupTimeout: 20 * time.Second}, Started: func(r string) { started <- r }}
	provider, err := model.LoadScripted("")
	if err != nil {
		t.Fatal(err)
	}
	g := Start(t.Context(), nil,
		Connected(RoleGate, RoleGate, connect, Gate(c, nil, gate.Options{})),
		Connected(RoleToolexec, RoleToolexec, connect, Toolexec(c, ToolexecConfig{})),
		Connected(RoleAgent, RoleAgent, connect, Agent(c, provider, agent.Options{})),
		Connected(RoleProcessor, RoleProcessor, connect, Processor(c, processor.Options{})),
	)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := AwaitStarted(ctx, g, started, 4); err != nil {
		t.Fatal(err)
	}
	if err := WaitService(ctx, g, srv.Connect(t), gate.ServiceName, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(); err != nil {
		t.Fatalf("Stop = %v, want a clean stop", err)
	}
}

// A role whose connection is closed for good dies with ErrConnClosed,
// and the waits for start-up and services give up with that cause.
func TestClosedConnectionIsADeath(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	nc := srv.Connect(t)
	other, running := make(chan struct{}), make(chan struct{})
	g := Start(t.Context(), nil,
		OnConn(RoleAgent, nc, func(ctx context.Context, nc *nats.Conn) error { close(running); <-ctx.Done(); return nil }),
		Role{Name: RoleGate, Run: func(ctx context.Context) error { <-ctx.Done(); close(other); return nil }},
	)
	<-running
	nc.Close()
	err := g.Wait()
	var se *StoppedError
	if !errors.As(err, &se) || se.Role != RoleAgent || !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Wait = %v, want agent's death by ErrConnClosed", err)
	}
	select {
	case <-other:
	default:
		t.Error("the other role was not stopped")
	}
	if err := AwaitStarted(t.Context(), g, make(chan string), 1); !errors.Is(err, ErrConnClosed) {
		t.Errorf("AwaitStarted after the death = %v, want the death's cause", err)
	}
	if err := WaitService(t.Context(), g, srv.Connect(t), "nobody", time.Minute); !errors.Is(err, ErrConnClosed) {
		t.Errorf("WaitService after the death = %v, want the death's cause", err)
	}
}

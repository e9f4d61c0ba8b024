//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServer is the real nats-server process, restartable on the same
// store directory and port.
type natsServer struct {
	bin, dir, log string
	port          int
	extra         []string // further arguments (cluster_test.go: name, cluster, routes)
	// connOpts are the readiness probe's connection options (the admin
	// principal's credentials on a server with parley's authorization).
	connOpts []nats.Option

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// serverReadyTimeout bounds how long start waits for JetStream to answer.
// A cluster node answers only once the three nodes elected a meta leader,
// which took over 20 s on a loaded 2-core CI machine (JetStream system
// temporarily unavailable, 10008).
const serverReadyTimeout = 60 * time.Second

// start runs the server and waits until JetStream answers.
func (s *natsServer) start() error {
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: starting nats-server at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, append([]string{"-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port)}, s.extra...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting nats-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("nats-server exited at start-up (see %s)", s.log)
		default:
		}
		if err := pingJetStream(s.url(), s.connOpts...); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("nats-server not ready after %v: %w (see %s)", serverReadyTimeout, err, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pingJetStream(url string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(time.Second), nats.NoReconnect()}, opts...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// stop sends SIGTERM (a clean shutdown) and waits; SIGKILL after 15s.
func (s *natsServer) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// worker is one replica slot of a worker role: a supervisor keeps a
// `parley <role>` process running in it (like a Kubernetes Deployment),
// restarting it 200-500 ms after the chaos loop kills it and 500 ms after
// it exits on its own (counted as a crash).
type worker struct {
	role string
	n    int
	bin  string
	args []string
	env  []string
	log  string
	rnd  *lockedRand

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	killed    bool // the current process was SIGKILLed by the chaos loop
	stopping  bool
	starts    int
	kills     int
	crashes   []string
	readyOnce bool
}

func (w *worker) name() string { return fmt.Sprintf("%s-%d", w.role, w.n) }

func (w *worker) startOnce() error {
	f, err := os.OpenFile(w.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(w.bin, append([]string{w.role}, w.args...)...)
	cmd.Env = w.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		f.Close()
		return errStopping
	}
	w.starts++
	fmt.Fprintf(f, "=== chaos: start #%d of %s at %s\n", w.starts, w.name(), time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== chaos: pid %d exited at %s: %v\n", cmd.Process.Pid, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(exited)
	}()
	w.cmd, w.exited, w.killed = cmd, exited, false
	return nil
}

var errStopping = errors.New("stopping")

// supervise keeps the slot's process running until ctx is cancelled.
func (w *worker) supervise(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.startOnce(); errors.Is(err, errStopping) {
			return
		} else if err != nil {
			w.mu.Lock()
			w.crashes = append(w.crashes, "start: "+err.Error())
			w.mu.Unlock()
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		w.mu.Lock()
		exited := w.exited
		w.mu.Unlock()
		<-exited
		w.mu.Lock()
		killed, stopping := w.killed, w.stopping
		if !killed && !stopping {
			w.crashes = append(w.crashes, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), w.cmd.ProcessState))
		}
		w.mu.Unlock()
		if stopping {
			return
		}
		delay := 500 * time.Millisecond
		if killed {
			delay = time.Duration(200+w.rnd.IntN(301)) * time.Millisecond
		}
		sleepCtx(ctx, delay)
	}
}

// kill SIGKILLs the running process; false if none is running.
func (w *worker) kill() (pid int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil || w.stopping || w.killed {
		return 0, false
	}
	select {
	case <-w.exited:
		return 0, false
	default:
	}
	w.killed = true
	w.kills++
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	return w.cmd.Process.Pid, true
}

// stall stops the current process with SIGSTOP and continues it with
// SIGCONT after d (or when ctx ends).
func (w *worker) stall(ctx context.Context, d time.Duration) (pid int, ok bool) {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0, false
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, false
	}
	go func() {
		sleepCtx(ctx, d)
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}()
	return cmd.Process.Pid, true
}

// shutdown stops the supervisor's process: SIGTERM, then SIGKILL after 5s.
func (w *worker) shutdown() {
	w.mu.Lock()
	w.stopping = true
	cmd, exited := w.cmd, w.exited
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// buildBinaries builds parley and the nats-server of the module graph
// into dir (from the repository root, so the module cache is used).
func buildBinaries(dir string) (parley, server string, err error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", "", err
	}
	parley, server = filepath.Join(dir, "parley"), filepath.Join(dir, "nats-server")
	for _, b := range [][]string{
		{"build", "-o", parley, "./cmd/parley"},
		{"build", "-o", server, "github.com/nats-io/nats-server/v2"},
	} {
		cmd := exec.Command("go", b...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go %v: %v\n%s", b, err, out)
		}
	}
	return parley, server, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Package subprocess runs the local stack's helper processes (DynamoDB
// Local's JVM, redis-server) so that none outlives the stack: each child
// gets its own process group, which Stop signals as a whole, and on Linux
// the kernel kills the child if the Go process dies without cleaning up (a
// test binary killed by its timeout, kill -9 on `make dev`).
package subprocess

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrExited means the process died before it became ready.
var ErrExited = errors.New("subprocess: process exited")

// Process is a running child.
type Process struct {
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error // how the process ended; set before done is closed

	stopOnce sync.Once
}

// Start runs name with args in its own process group, in directory dir
// (the current one when empty). Its combined output is kept (the last few
// KiB) for error messages.
func Start(dir, name string, args ...string) (*Process, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out := &tail{max: 8 << 10}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("subprocess: start %s: %w", name, err)
	}
	p := &Process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Output returns the tail of what the process printed.
func (p *Process) Output() string { return p.out.String() }

// Stop signals the whole process group with SIGTERM, waits up to grace for
// it to exit, then kills the group. It is safe to call more than once.
func (p *Process) Stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			<-p.done
		}
		// Grandchildren that ignored SIGTERM must not linger either.
		_ = syscall.Kill(pgid, syscall.SIGKILL)
	})
}

// WaitReady calls ready every interval until it returns nil, the process
// exits, or ctx ends. The returned error names the last readiness failure
// and, when the process died, what it printed.
func (p *Process) WaitReady(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w (%v); output:\n%s", ErrExited, p.err, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last check: %v)", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(b)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// FreePort returns a loopback port nobody listens on, picked at random
// below the kernel's ephemeral range (Linux starts it at 32768): outgoing
// connections take their local ports from that range, and one could
// otherwise hold the port of a server stopped and started again on it
// (the Redis outage tests). Another process can still take the port
// before the caller binds it; callers retry.
func FreePort() (int, error) {
	const low, high = 20000, 32768
	for range 50 {
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("subprocess: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Package redisserver runs a real redis-server on a free loopback port for
// tests and the local stack. It can be stopped and started again on the
// same port, so tests can take Redis away and bring it back the way an
// ElastiCache failover or outage would.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rallyhq/rally/infra/local/subprocess"
)

// ErrNotInstalled means redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server is required (e.g. apt-get install redis-server, or brew install redis)")

// BinaryEnv overrides the redis-server binary.
const BinaryEnv = "RALLY_REDIS_SERVER"

// Server is a redis-server bound to one port for its whole life.
type Server struct {
	bin  string
	port int
	opts Options

	mu   sync.Mutex
	proc *subprocess.Process
}

// Options adjust a server.
type Options struct {
	// Args are extra redis-server arguments (e.g. cluster mode).
	Args []string
	// Dir is the server's working directory (where cluster mode keeps its
	// nodes file); default the current one.
	Dir string
}

// Start launches redis-server on a free port and waits until it answers
// PING.
func Start(ctx context.Context) (*Server, error) { return StartWith(ctx, Options{}) }

// StartWith is Start with options.
func StartWith(ctx context.Context, opts Options) (*Server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 {
		port, err := subprocess.FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, port: port, opts: opts}
		if last = s.Start(ctx); last == nil {
			return s, nil
		}
	}
	return nil, last
}

func binary() (string, error) {
	name := "redis-server"
	if v := os.Getenv(BinaryEnv); v != "" {
		name = v
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redisserver: %w; %s was not found", ErrNotInstalled, name)
	}
	return bin, nil
}

// Start (re)starts the server on its port. Starting a running server does
// nothing.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.Done(): // crashed or killed from outside: start anew
		default:
			return nil
		}
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		// A cache: nothing to persist, nothing to load on restart.
		"--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning"}, s.opts.Args...)
	proc, err := subprocess.Start(s.opts.Dir, s.bin, args...)
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := proc.WaitReady(wctx, 10*time.Millisecond, s.ping); err != nil {
		proc.Stop(time.Second)
		return fmt.Errorf("redisserver: start on port %d: %w", s.port, err)
	}
	s.proc = proc
	return nil
}

// Stop kills the server and waits until its port refuses connections.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop(2 * time.Second)
		s.proc = nil
	}
}

// Close stops the server for good.
func (s *Server) Close() error {
	s.Stop()
	return nil
}

// URL is redis://127.0.0.1:<port>, stable across Stop and Start.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the port the server listens on.
func (s *Server) Port() int { return s.port }

// PID is the running server's process id, 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

func (s *Server) ping(ctx context.Context) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redisserver: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

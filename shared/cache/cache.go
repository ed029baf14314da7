// Package cache owns Rally's connection to Redis/Valkey: a cluster-aware
// go-redis client with short timeouts and a circuit breaker, so a sick cache
// costs microseconds, not timeouts, and every caller falls back to DynamoDB.
// Redis is a rebuildable cache here; nothing in it is the only copy.
package cache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrOpen is returned without touching the network while the breaker is open.
var ErrOpen = errors.New("cache: circuit open, redis recently failing")

// ErrDisabled is returned when no Redis is configured.
var ErrDisabled = errors.New("cache: no redis configured")

// Options configures a client.
type Options struct {
	// URL is redis://host:port or rediss://host:port (TLS), optionally
	// with a database number (redis://host:port/2; only 0 in a cluster).
	URL string
	// Cluster selects cluster semantics (ElastiCache Serverless).
	Cluster bool
	// Timeout bounds each command.
	Timeout time.Duration
	// Hooks are added after the breaker (e.g. tracing).
	Hooks []redis.Hook
	// Breaker tunes the circuit breaker; zero values take defaults.
	Breaker BreakerOptions
}

// New returns a client for opts. A client is returned even for an empty URL:
// every command then fails fast with ErrDisabled, so callers need no special
// case for "no cache".
func New(opts Options) (redis.UniversalClient, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 250 * time.Millisecond
	}
	if opts.URL == "" {
		c := redis.NewClient(&redis.Options{Addr: "disabled.invalid:0"})
		c.AddHook(disabledHook{})
		return c, nil
	}
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("cache: bad redis url %q", opts.URL)
	}
	var tlsCfg *tls.Config
	if u.Scheme == "rediss" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	}
	db, err := database(u.Path)
	if err != nil || (db != 0 && opts.Cluster) {
		return nil, fmt.Errorf("cache: bad redis url %q: the path is the database number, and a cluster has only 0", opts.URL)
	}
	password, _ := u.User.Password()
	uo := &redis.UniversalOptions{
		Addrs:                 []string{u.Host},
		DB:                    db,
		Username:              u.User.Username(),
		Password:              password,
		TLSConfig:             tlsCfg,
		DialTimeout:           2 * opts.Timeout,
		ReadTimeout:           opts.Timeout,
		WriteTimeout:          opts.Timeout,
		PoolTimeout:           opts.Timeout,
		MaxRetries:            1,
		ContextTimeoutEnabled: true,
		IsClusterMode:         opts.Cluster,
	}
	client := redis.NewUniversalClient(uo)
	client.AddHook(&breakerHook{b: NewBreaker(opts.Breaker)})
	for _, h := range opts.Hooks {
		client.AddHook(h)
	}
	return client, nil
}

// database is the database number a URL's path names: "" or "/" is 0.
func database(path string) (int, error) {
	path = strings.TrimPrefix(path, "/")
	if path == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(path)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("database %q is not a number", path)
	}
	return n, nil
}

// IsMiss reports whether err is a cache miss rather than a failure.
func IsMiss(err error) bool { return errors.Is(err, redis.Nil) }

// BreakerOptions tunes a Breaker.
type BreakerOptions struct {
	// Failures is how many consecutive failures open the circuit.
	Failures int
	// Cooldown is how long the circuit stays open before one probe.
	Cooldown time.Duration
}

// Breaker is a consecutive-failure circuit breaker.
type Breaker struct {
	mu        sync.Mutex
	opts      BreakerOptions
	failures  int
	openUntil time.Time
	now       func() time.Time
}

// NewBreaker returns a closed breaker.
func NewBreaker(opts BreakerOptions) *Breaker {
	if opts.Failures == 0 {
		opts.Failures = 3
	}
	if opts.Cooldown == 0 {
		opts.Cooldown = time.Second
	}
	return &Breaker{opts: opts, now: time.Now}
}

// Allow reports whether a call may go to the network now: always while
// closed, never while open, and again once the cooldown has passed
// (half-open), when the next outcome closes the circuit or opens it for
// another cooldown. Half-open admits every call rather than one probe: a
// new connection runs its own handshake commands through the same hooks,
// and a single-probe gate would refuse them and never close.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures < b.opts.Failures || !b.now().Before(b.openUntil)
}

// Record notes the outcome of a call that Allow let through.
func (b *Breaker) Record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !isFailure(err) {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= b.opts.Failures {
		b.openUntil = b.now().Add(b.opts.Cooldown)
	}
}

// isFailure separates a sick connection from answers Redis gave on purpose
// (a miss, a script error, a wrong type).
func isFailure(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	return !errors.Is(err, context.Canceled)
}

type breakerHook struct{ b *Breaker }

func (h *breakerHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *breakerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.b.Allow() {
			cmd.SetErr(ErrOpen)
			return ErrOpen
		}
		err := next(ctx, cmd)
		h.b.Record(err)
		return err
	}
}

func (h *breakerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.b.Allow() {
			for _, c := range cmds {
				c.SetErr(ErrOpen)
			}
			return ErrOpen
		}
		err := next(ctx, cmds)
		h.b.Record(err)
		return err
	}
}

type disabledHook struct{}

func (disabledHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) { return nil, ErrDisabled }
}

func (disabledHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		cmd.SetErr(ErrDisabled)
		return ErrDisabled
	}
}

func (disabledHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			c.SetErr(ErrDisabled)
		}
		return ErrDisabled
	}
}

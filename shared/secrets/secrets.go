// Package secrets holds the keys a function reads from Secrets Manager
// when it starts (routes.Secret): each key's current version and, for a
// key that rotates, the previous one, so that what was signed or hashed
// under the previous version is still recognised after a rotation. It
// reads a secret once and keeps it; it reads it again when asked to
// (something verified under neither version: a newer instance may have
// read a newer key) and when the versions it holds grow old.
package secrets

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/rallyhq/rally/shared/clock"
)

// Loader reads a key: its current version, and the previous one (nil when
// there is none).
type Loader func(ctx context.Context) (current, previous []byte, err error)

const (
	// ReloadEvery bounds how often a Ring asks its loader again.
	ReloadEvery = time.Minute
	// MaxAge is how old the versions a Ring holds may grow before Refresh
	// reads them again: a rotation reaches every warm instance within it.
	MaxAge = 5 * time.Minute
)

// ErrNoKey means a secret has no current value.
var ErrNoKey = errors.New("secrets: the secret has no current value")

// Ring holds the versions of one key. Its methods are safe for concurrent
// use; a nil Ring holds no key.
type Ring struct {
	mu       sync.Mutex
	current  []byte
	previous []byte
	load     Loader
	clock    clock.Clock
	// loaded is when the versions held were read, tried when the loader
	// was last asked (successfully or not).
	loaded, tried time.Time
}

// Fixed holds fixed versions (the local stack, tests); previous may be
// nil. It never reloads.
func Fixed(current, previous []byte) *Ring {
	return &Ring{current: current, previous: previous}
}

// Load reads the versions with load now, and again when asked to; clk
// times the reloads (nil: the wall clock).
func Load(ctx context.Context, load Loader, clk clock.Clock) (*Ring, error) {
	if clk == nil {
		clk = clock.System{}
	}
	current, previous, err := load(ctx)
	if err != nil {
		return nil, err
	}
	if len(current) == 0 {
		return nil, ErrNoKey
	}
	now := clk.Now()
	return &Ring{current: current, previous: previous, load: load, clock: clk, loaded: now, tried: now}, nil
}

// Keys returns the versions held: the current one (nil when the ring holds
// no key) and the previous one (nil when there is none).
func (r *Ring) Keys() (current, previous []byte) {
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current, r.previous
}

// Reload asks the loader for the versions again, unless it was asked
// within ReloadEvery, and reports whether they changed. A failed reload
// keeps the versions held.
func (r *Ring) Reload(ctx context.Context) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload(ctx)
}

// Refresh reads the versions again once those held are older than MaxAge
// (at most once every ReloadEvery while reading fails), and reports
// whether they changed.
func (r *Ring) Refresh(ctx context.Context) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.load == nil || r.clock.Now().Sub(r.loaded) < MaxAge {
		return false
	}
	return r.reload(ctx)
}

func (r *Ring) reload(ctx context.Context) bool {
	if r.load == nil || r.clock.Now().Sub(r.tried) < ReloadEvery {
		return false
	}
	r.tried = r.clock.Now()
	current, previous, err := r.load(ctx)
	if err != nil || len(current) == 0 {
		return false
	}
	r.loaded = r.tried
	changed := !hmac.Equal(current, r.current) || !hmac.Equal(previous, r.previous)
	r.current, r.previous = current, previous
	return changed
}

// Reader is the part of Secrets Manager keys are read with.
type Reader interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Versions reads the secret arn from Secrets Manager: its AWSCURRENT
// version, and, when withPrevious is set, its AWSPREVIOUS one (nil when
// the secret was never rotated), both at once.
func Versions(sm Reader, arn string, withPrevious bool) Loader {
	read := func(ctx context.Context, stage string) ([]byte, error) {
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(stage)})
		if err != nil {
			return nil, err
		}
		if out.SecretString == nil || *out.SecretString == "" {
			return nil, fmt.Errorf("its %s version is empty", stage)
		}
		return []byte(*out.SecretString), nil
	}
	return func(ctx context.Context) (current, previous []byte, err error) {
		var prevErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			if withPrevious {
				previous, prevErr = read(ctx, "AWSPREVIOUS")
			}
		}()
		current, err = read(ctx, "AWSCURRENT")
		<-done
		if err != nil {
			return nil, nil, fmt.Errorf("secrets: read secret %s: %w", arn, err)
		}
		var notFound *smtypes.ResourceNotFoundException
		switch {
		case errors.As(prevErr, &notFound):
			// Never rotated.
			return current, nil, nil
		case prevErr != nil:
			return nil, nil, fmt.Errorf("secrets: read secret %s (AWSPREVIOUS): %w", arn, prevErr)
		}
		return current, previous, nil
	}
}

package privacy

import (
	"context"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/cachegen"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/ratelimit"
	"github.com/rallyhq/rally/shared/reactions"
	"github.com/rallyhq/rally/shared/streaks"
)

// Reactions erases favorites and likes. Edges are deleted, which the
// counter processor counts like an unfavorite (counts and trending are
// compensated, once); the counter's per-edge markers and the cached
// memberships are dropped only after those deletions were counted, so no
// marker is written again after they are gone.
type Reactions struct {
	Edges interface {
		EraseUser(ctx context.Context, user string, before func(map[reactions.Ref]int64) error) (map[reactions.Ref]int64, error)
	}
	Counts interface {
		Markers(ctx context.Context, user string) (map[reactions.Ref]int64, error)
		ForgetUser(ctx context.Context, user string) (int, error)
	}
	Cache interface {
		ForgetUser(ctx context.Context, user string) error
	}
	Gen *cachegen.Tracker
	// Wait bounds how long one run waits for the counter processor
	// (default 10s); past it the erasure resumes on the next tick.
	Wait time.Duration
}

// Name implements Part.
func (p *Reactions) Name() string { return "reactions" }

// Erase implements Part.
func (p *Reactions) Erase(ctx context.Context, r *Run) error {
	// The versions are recorded before each page is deleted, so a run that
	// dies deleting still knows what to wait for; an edge that changed
	// between the listing and its deletion is recorded again at the
	// version it was deleted at.
	announced := map[reactions.Ref]int64{}
	await := func(refs map[reactions.Ref]int64) error {
		versions := make(map[string]int64, len(refs))
		for ref, v := range refs {
			if v > announced[ref] {
				announced[ref] = v
				versions[awaitKey(string(ref.Kind), ref.TargetID)] = v
			}
		}
		return r.Await(ctx, versions)
	}
	deleted, err := p.Edges.EraseUser(ctx, r.UserID, await)
	if aerr := await(deleted); aerr != nil {
		return aerr
	}
	if err != nil {
		return err
	}
	if err := p.counted(ctx, r); err != nil {
		return err
	}
	// Counted: the versions are no longer needed, and must not be awaited
	// again once the markers below are gone.
	if err := r.Counted(ctx); err != nil {
		return err
	}
	if _, err := p.Counts.ForgetUser(ctx, r.UserID); err != nil {
		return err
	}
	if err := p.Cache.ForgetUser(ctx, r.UserID); err != nil {
		return fmt.Errorf("forget cached reactions: %w", err)
	}
	return p.Gen.Drop(ctx, reactions.DirtyUserKey(r.UserID))
}

// counted waits, within Wait, until every deleted edge has been counted.
func (p *Reactions) counted(ctx context.Context, r *Run) error {
	awaited, err := r.Awaited(ctx)
	if err != nil || len(awaited) == 0 {
		return err
	}
	wait := p.Wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	for {
		markers, err := p.Counts.Markers(ctx, r.UserID)
		if err != nil {
			return err
		}
		seen := make(map[string]int64, len(markers))
		for ref, m := range markers {
			seen[awaitKey(string(ref.Kind), ref.TargetID)] = m
		}
		behind := 0
		for key, v := range awaited {
			if seen[key] < v {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("%d deleted reactions not yet counted: %w", behind, ErrNotYet)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// BoardPeriod names one period of one leaderboard.
type BoardPeriod struct{ Board, Period string }

// Scores erases a player's scores from every leaderboard and period, and
// every submission of theirs, in DynamoDB (member counts follow) and in
// Redis. The leaderboard processor forgets deleted scores too; erasing in
// Redis here as well means a completed erasure has nothing left anywhere.
type Scores struct {
	Definitions interface {
		List(ctx context.Context) ([]leaderboards.Definition, error)
	}
	// Delete deletes the player's submissions on boards and their scores,
	// returning the periods that held one.
	Delete func(ctx context.Context, player string, boards []string) ([]BoardPeriod, error)
	// Forget takes the player off a board period in Redis.
	Forget func(ctx context.Context, d leaderboards.Definition, period, player string) error
}

// Name implements Part.
func (p *Scores) Name() string { return "scores" }

// Erase implements Part.
func (p *Scores) Erase(ctx context.Context, r *Run) error {
	defs, err := p.Definitions.List(ctx)
	if err != nil {
		return err
	}
	byID := make(map[string]leaderboards.Definition, len(defs))
	ids := make([]string, 0, len(defs))
	for _, d := range defs {
		byID[d.ID] = d
		ids = append(ids, d.ID)
	}
	periods, err := p.Delete(ctx, r.UserID, ids)
	if err != nil {
		return err
	}
	for _, bp := range periods {
		d, ok := byID[bp.Board]
		if !ok {
			continue
		}
		if err := p.Forget(ctx, d, bp.Period, r.UserID); err != nil {
			return fmt.Errorf("forget a score in redis: %w", err)
		}
	}
	return nil
}

// Streaks erases a player's streak, points events, daily totals and
// activity idempotency records, and their cached streak and board entries.
type Streaks struct {
	Store interface {
		Get(ctx context.Context, user string) (streaks.State, bool, error)
		ErasePlayer(ctx context.Context, user string) error
	}
	Cache streaks.Cache
	Gen   *cachegen.Tracker
}

// Name implements Part.
func (p *Streaks) Name() string { return "streaks" }

// Erase implements Part.
func (p *Streaks) Erase(ctx context.Context, r *Run) error {
	st, ok, err := p.Store.Get(ctx, r.UserID)
	if err != nil {
		return err
	}
	if err := p.Store.ErasePlayer(ctx, r.UserID); err != nil {
		return err
	}
	gone := streaks.State{UserID: r.UserID, Removed: true}
	if ok {
		gone = st
		gone.Removed = true
	}
	if err := p.Cache.Put(ctx, gone); err != nil {
		return fmt.Errorf("forget the cached streak: %w", err)
	}
	return p.Gen.Drop(ctx, streaks.DirtyUserKey(r.UserID))
}

// Profile erases a player's profile, friend list and analytics secret (one
// item) and takes them off every other player's friend list. It runs last:
// once the secret is gone, the player's exported events cannot be tied to
// them.
type Profile struct {
	Players interface {
		ErasePlayer(ctx context.Context, player string) error
	}
}

// Name implements Part.
func (p *Profile) Name() string { return "profile" }

// Erase implements Part.
func (p *Profile) Erase(ctx context.Context, r *Run) error {
	return p.Players.ErasePlayer(ctx, r.UserID)
}

// Requests erases the player's HTTP idempotency records and rate-limit
// counters.
type Requests struct {
	Idempotency interface {
		EraseOwner(ctx context.Context, user string) (int, error)
	}
	Limits *ratelimit.Limiter
	Rules  []ratelimit.Rule
}

// Name implements Part.
func (p *Requests) Name() string { return "requests" }

// Erase implements Part.
func (p *Requests) Erase(ctx context.Context, r *Run) error {
	if _, err := p.Idempotency.EraseOwner(ctx, r.UserID); err != nil {
		return err
	}
	return p.Limits.Forget(ctx, r.UserID, p.Rules...)
}

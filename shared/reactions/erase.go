package reactions

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/clock"
)

// Eraser erases a user's favorites and likes (a part of shared/privacy's
// erasure job). Edges are deleted, which the counter processor counts like
// an unfavorite, so counts and trending are compensated exactly once.
// Before each edge is deleted it is held (a placeholder counter marker
// for an edge the processor has not counted yet), so every deleted edge
// has a marker until its deletion is counted, which deletes it: the
// erasure waits for the user's markers to go. The user's cached
// memberships (and any marker left) are dropped only after that (and any
// counting a dead processor left unmarked was finished, so no intent
// naming the user stays behind); meanwhile the versions waited for are
// kept durably, so an erasure that dies mid-way still knows what it waits
// for. The
// user's flip counts (Flips) go with their cached memberships; an
// instance's own counts forget by themselves within the hour.
type Eraser struct {
	Edges interface {
		// EraseUser deletes every edge of user, calling before with each
		// page of refs and versions before that page is deleted; it returns
		// the versions the edges were deleted at.
		EraseUser(ctx context.Context, user string, before func(map[Ref]int64) error) (map[Ref]int64, error)
	}
	Counts interface {
		// FinishPending completes what the counter processor committed
		// for targets but has not yet marked counted (it died in
		// between): the markers read next are then complete, and nothing
		// naming the user waits for a batch that may never come.
		FinishPending(ctx context.Context, targets []Target, now time.Time, committed Committed) error
		// Hold gives each edge without a counter marker a placeholder
		// one (version 0), which the counting of its deletion removes.
		Hold(ctx context.Context, refs []Ref, now time.Time) error
		// Markers returns the last counted version of each of user's
		// edges that still has a marker.
		Markers(ctx context.Context, user string) (map[Ref]int64, error)
		// ForgetUser drops user's counted-version markers.
		ForgetUser(ctx context.Context, user string) (int, error)
	}
	Cache interface {
		ForgetUser(ctx context.Context, user string) error
		// ForgetFlips drops the user's flip counts (the flip velocity
		// control's, named by the user).
		ForgetFlips(ctx context.Context, user string) error
	}
	Gen interface {
		Drop(ctx context.Context, keys ...string) error
		// MarkDirty records Redis keys whose values may be wrong: the
		// counter processor's repair mirrors them again.
		MarkDirty(ctx context.Context, keys []string, at time.Time) error
	}
	Awaits ErasureAwaits
	// Wait bounds how long one run waits for the counter processor
	// (default 10s); past it the erasure resumes on the next run.
	Wait time.Duration
}

// ErasureAwaits keeps, per erased user, the versions (kind#target →
// version) an erasure waits to see counted; shared/privacy keeps them.
type ErasureAwaits interface {
	Add(ctx context.Context, user string, versions map[string]int64) error
	List(ctx context.Context, user string) (map[string]int64, error)
	Clear(ctx context.Context, user string) error
}

// Name implements privacy.Part.
func (e *Eraser) Name() string { return "reactions" }

// Erase implements privacy.Part: done is false while the counter processor
// has not counted every deletion yet, and a later run resumes.
func (e *Eraser) Erase(ctx context.Context, user string) (done bool, err error) {
	// The versions are recorded before each page is deleted; an edge that
	// changed between the listing and its deletion is recorded again at
	// the version it was deleted at.
	announced := map[Ref]int64{}
	await := func(refs map[Ref]int64) error {
		versions := make(map[string]int64, len(refs))
		held := make([]Ref, 0, len(refs))
		for ref, v := range refs {
			if v > announced[ref] {
				announced[ref] = v
				versions[awaitKey(ref)] = v
				held = append(held, ref)
			}
		}
		if err := e.Awaits.Add(ctx, user, versions); err != nil {
			return err
		}
		return e.Counts.Hold(ctx, held, time.Now())
	}
	deleted, err := e.Edges.EraseUser(ctx, user, await)
	if aerr := await(deleted); aerr != nil {
		return false, aerr
	}
	if err != nil {
		return false, err
	}
	if counted, err := e.counted(ctx, user); !counted || err != nil {
		return false, err
	}
	// Counted: the versions are no longer needed, and must not be awaited
	// again once the markers below are gone.
	if err := e.Awaits.Clear(ctx, user); err != nil {
		return false, err
	}
	if _, err := e.Counts.ForgetUser(ctx, user); err != nil {
		return false, err
	}
	if err := e.Cache.ForgetUser(ctx, user); err != nil {
		return false, fmt.Errorf("forget cached reactions: %w", err)
	}
	if err := e.Cache.ForgetFlips(ctx, user); err != nil {
		return false, fmt.Errorf("forget flip counts: %w", err)
	}
	if err := e.Gen.Drop(ctx, dirtyUser+user); err != nil {
		return false, err
	}
	return true, nil
}

// markMoved marks dirty what a commit the erasure finished for a dead
// counter processor moved: the processor's run died before mirroring it.
func (e *Eraser) markMoved(ctx context.Context, moved map[Target][]BucketRef) error {
	keys := make([]string, 0, len(moved))
	for t := range moved {
		keys = append(keys, dirtyTarget+string(t.Kind)+"#"+t.ID)
	}
	return e.Gen.MarkDirty(ctx, keys, time.Now())
}

func awaitKey(ref Ref) string { return string(ref.Kind) + "#" + ref.TargetID }

// awaitedTargets are the targets of awaited versions (see awaitKey).
func awaitedTargets(awaited map[string]int64) []Target {
	targets := make([]Target, 0, len(awaited))
	for key := range awaited {
		kind, id, ok := strings.Cut(key, "#")
		if k, err := ParseKind(kind); ok && err == nil {
			targets = append(targets, Target{Kind: k, ID: id})
		}
	}
	return targets
}

// counted reports, waiting up to Wait, whether every deleted edge has been
// counted.
func (e *Eraser) counted(ctx context.Context, user string) (bool, error) {
	awaited, err := e.Awaits.List(ctx, user)
	if err != nil || len(awaited) == 0 {
		return err == nil, err
	}
	wait := e.Wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	targets := awaitedTargets(awaited)
	for {
		if err := e.Counts.FinishPending(ctx, targets, time.Now(), e.markMoved); err != nil {
			return false, err
		}
		markers, err := e.Counts.Markers(ctx, user)
		if err != nil {
			return false, err
		}
		seen := make(map[string]int64, len(markers))
		for ref, m := range markers {
			seen[awaitKey(ref)] = m
		}
		// Counting a deletion deletes the edge's marker, which Hold made
		// sure existed; a marker at the deletion's version or past it is
		// one a marker from before markers held states left.
		behind := 0
		for key, v := range awaited {
			if m, ok := seen[key]; ok && m < v {
				behind++
			}
		}
		if behind == 0 {
			return true, nil
		}
		if time.Now().Add(pause).After(deadline) {
			return false, nil
		}
		if err := clock.Sleep(ctx, pause); err != nil {
			return false, err
		}
		pause = min(2*pause, time.Second)
	}
}

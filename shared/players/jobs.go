package players

import (
	"context"

	"github.com/rallyhq/rally/shared/jobs"
)

// JobStore is what the friends recompute writes of Players.
type JobStore interface {
	// IndexFriends writes the reverse entries of the friend lists written
	// before they existed, a page at a time, from after; it returns how
	// many lists it read and indexed, and where to continue ("" after the
	// last page).
	IndexFriends(ctx context.Context, after string) (read, indexed int, next string, err error)
}

// Jobs are the players' tasks: recompute the reverse friend entries (whose
// lists name a player, which an erasure follows) from the friend lists.
// Run once after upgrading a deployment whose lists predate the entries:
// until then an erasure does not reach those lists.
type Jobs struct{ Store JobStore }

// Tasks registers the friends recompute.
func (j *Jobs) Tasks() jobs.Tasks {
	return jobs.Tasks{{Kind: jobs.Recompute, Target: jobs.Friends}: jobs.Named("friends-recompute", j.recompute)}
}

// recompute indexes the lists a page at a time, checkpointing where it is.
func (j *Jobs) recompute(ctx context.Context, _ jobs.Spec, cursor string, w *jobs.Work) (string, bool, error) {
	for {
		if ctx.Err() != nil {
			return cursor, false, nil
		}
		read, indexed, next, err := j.Store.IndexFriends(ctx, cursor)
		if err != nil {
			return "", false, err
		}
		w.Findings.Checked += int64(read)
		w.Progress.Done += int64(read)
		for range indexed {
			w.Findings.Found("friend_index", "a friend list had no reverse entries", true)
		}
		if next == "" {
			return "", true, nil
		}
		cursor = next
		if err := w.Checkpoint(ctx, cursor); err != nil {
			return "", false, err
		}
	}
}

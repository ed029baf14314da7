package reactions

import (
	"context"
	"fmt"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/imports"
	"github.com/rallyhq/rally/shared/jobs"
)

// Line types of reactions in an import file.
const (
	LineFavorite = "favorite"
	LineLike     = "like"
)

// ReactionLine is an import file's favorite or like line: the user's
// edge to a game (game_id) or a post (post_id), active since created_at
// (the import's start when absent).
type ReactionLine struct {
	Type      string     `json:"type"`
	UserID    *string    `json:"user_id"`
	GameID    *string    `json:"game_id,omitempty"`
	PostID    *string    `json:"post_id,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// Activated is an edge an import makes ACTIVE: the version it had (0 for
// none) and when it became active.
type Activated struct {
	Ref
	Previous int64
	At       time.Time
}

// EdgeImports is what an import needs of the edges: a chunk's edges read
// in batches, their new state written in batches. The writes are not
// conditional: an edge a user changes through the API at the same moment
// may be overwritten (see docs/IMPORT.md).
type EdgeImports interface {
	Held(ctx context.Context, refs []Ref) (map[Ref]Edge, error)
	Import(ctx context.Context, edges []Activated) error
}

// Importer loads an import file's favorite and like lines as if each user
// had reacted through the API: an edge not yet ACTIVE becomes ACTIVE with
// its version moved on; an ACTIVE one is left as it is, so a file runs
// twice, or a chunk again after a run cut short, to the same edges. The
// counts, Redis counters and trending follow from the Reactions stream
// (the counter processor), as for reactions through the API.
type Importer struct {
	Edges EdgeImports
}

var _ imports.Importer = (*Importer)(nil)

// Name implements imports.Importer.
func (*Importer) Name() string { return "reactions" }

// Types implements imports.Importer.
func (*Importer) Types() []string { return []string{LineFavorite, LineLike} }

// Import implements imports.Importer.
func (im *Importer) Import(ctx context.Context, b imports.Batch) ([]imports.Rejection, []string, error) {
	var rejected []imports.Rejection
	var refs []Ref
	at := map[Ref]time.Time{}
	for _, l := range b.Lines {
		ref, when, err := decodeReaction(l, b.At)
		if err != nil {
			rejected = append(rejected, imports.Rejection{Line: l.No, Reason: err.Error()})
			continue
		}
		if _, ok := at[ref]; !ok {
			refs = append(refs, ref)
			at[ref] = when
		}
	}
	if len(refs) == 0 {
		return rejected, nil, nil
	}
	held, err := im.Edges.Held(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	var edges []Activated
	for _, ref := range refs {
		e, ok := held[ref]
		if ok && e.State == Active {
			continue
		}
		edges = append(edges, Activated{Ref: ref, Previous: e.Version, At: at[ref]})
	}
	if err := im.Edges.Import(ctx, edges); err != nil {
		return nil, nil, err
	}
	return rejected, nil, nil
}

// decodeReaction validates a line as the reaction routes validate their
// path, and says which edge it names and since when.
func decodeReaction(l imports.Line, start time.Time) (Ref, time.Time, error) {
	var in ReactionLine
	if err := api.DecodeJSON(l.Raw, &in); err != nil {
		return Ref{}, time.Time{}, detail(err)
	}
	kind, target, field := Favorite, in.GameID, "game_id"
	other := in.PostID
	if l.Type == LineLike {
		kind, target, field, other = Like, in.PostID, "post_id", in.GameID
	}
	var f errs.Fields
	if in.UserID == nil {
		f.Add("user_id", "is required")
	} else {
		api.CheckID(&f, "user_id", *in.UserID)
	}
	if target == nil {
		f.Add(field, "is required")
	} else {
		api.CheckID(&f, field, *target)
	}
	if other != nil {
		f.Add("type", fmt.Sprintf("a %s names a %s only", l.Type, field))
	}
	when := start
	if in.CreatedAt != nil {
		when = in.CreatedAt.UTC().Truncate(time.Millisecond)
		if when.Before(time.Unix(0, 0)) || when.After(start.Add(24*time.Hour)) {
			f.Add("created_at", "must be after 1970 and not in the future")
		}
	}
	if err := f.Err(); err != nil {
		return Ref{}, time.Time{}, detail(err)
	}
	return Ref{UserID: *in.UserID, Kind: kind, TargetID: *target}, when, nil
}

// detail is what a rejected line's example says of err.
func detail(err error) error {
	if e, ok := err.(*errs.Error); ok {
		return fmt.Errorf("%s", e.Detail)
	}
	return err
}

// CatchUp implements imports.Importer: nothing to do, the counter
// processor counts imported edges from the stream like any other.
func (*Importer) CatchUp(context.Context, []string, *jobs.Work) error { return nil }

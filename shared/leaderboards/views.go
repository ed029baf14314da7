package leaderboards

import (
	"context"
	"strings"

	"github.com/rallyhq/rally/shared/errs"
)

// Regional views. A regional definition keeps, beside its global board, one
// board per region: each player's score also appears on the board of the
// region they were in when their last submission was applied. A view is a
// board of its own everywhere below the API (Scores items, member counts,
// the score index, Redis), named "<board>@<region>": ids cannot hold '@',
// so a view's name never collides with a board's.

// viewSep separates a view's board from its region.
const viewSep = "@"

// View is the definition of d's view of one region: the same rules under
// the view's own name.
func (d Definition) View(region string) Definition {
	v := d
	v.ID = ViewID(d.ID, region)
	return v
}

// ViewID names the view of a region of a board.
func ViewID(board, region string) string { return board + viewSep + region }

// SplitView reads a view's name; ok is false for a board's own name.
func SplitView(id string) (board, region string, ok bool) {
	return strings.Cut(id, viewSep)
}

// resolve finds the definition a board name stands for among defs (by
// board id): the board's own, or its view of a region.
func resolve(defs map[string]Definition, board string) (Definition, bool) {
	base, region, view := SplitView(board)
	d, ok := defs[base]
	if ok && view {
		d = d.View(region)
	}
	return d, ok
}

// WithViews returns defs resolving view names too: Get("weekly@eu") is
// the view of region eu of the regional board weekly. Processors and jobs
// meet view names in the data they handle.
func WithViews(defs Definitions) Definitions { return views{defs} }

type views struct{ Definitions }

func (v views) Get(ctx context.Context, id string) (Definition, error) {
	board, region, ok := SplitView(id)
	if !ok {
		return v.Definitions.Get(ctx, id)
	}
	d, err := v.Definitions.Get(ctx, board)
	if err != nil {
		return Definition{}, err
	}
	if !d.Regional {
		return Definition{}, errs.New(errs.NotFound, "leaderboard %s has no regional views", board)
	}
	return d.View(region), nil
}

// regionView returns the definition a read of region sees: the board
// itself when region is empty, else its view of the region, which only a
// regional board has.
func regionView(d Definition, region string) (Definition, error) {
	if region == "" {
		return d, nil
	}
	if !d.Regional {
		return Definition{}, errs.Field("region", "leaderboard "+d.ID+" has no regional views (it was not defined with \"regional\": true)")
	}
	return d.View(region), nil
}

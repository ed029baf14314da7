package app

import (
	"context"

	"github.com/rallyhq/rally/shared/leaderboards"
	lbmirror "github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/ratelimit"
	rxmirror "github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	stmirror "github.com/rallyhq/rally/shared/streaks/mirror"
)

// erasureRecords is the Erasures table's store.
func (d *Deps) erasureRecords() *privacy.Records {
	return &privacy.Records{DB: d.DB, Table: d.Config.Tables.Of(schema.Erasures)}
}

// bindPrivacy binds the erasure routes and the erasure processor.
func bindPrivacy(d *Deps) {
	tables := d.Config.Tables
	records := d.erasureRecords()
	h := &privacy.API{Records: records, Clock: d.Clock}
	d.http[routes.EraseUser.Function] = h.EraseUser
	d.http[routes.ErasureStatus.Function] = h.ErasureStatus

	stGen := d.tracker(stmirror.Scope)
	scores := d.scores()
	boards := lbmirror.New(d.Redis, d.tracker(lbmirror.Scope))
	rxGen := d.tracker(rxmirror.Scope)
	var rules []ratelimit.Rule
	for _, r := range d.reactionBudgets() {
		rules = append(rules, r)
	}
	job := &privacy.Job{
		Records: records,
		Awaits:  &privacy.Awaits{DB: d.DB, Table: tables.Of(schema.Counters)},
		Parts: []privacy.Part{
			&privacy.Reactions{
				Edges:  d.edges(),
				Counts: d.reactionCounts(),
				Cache:  rxmirror.New(d.Redis, rxGen),
				Gen:    rxGen,
			},
			&privacy.Scores{
				Definitions: d.boardDefinitions(),
				Delete: func(ctx context.Context, player string, boards []string) ([]privacy.BoardPeriod, error) {
					periods, err := scores.ErasePlayer(ctx, player, boards)
					out := make([]privacy.BoardPeriod, len(periods))
					for i, bp := range periods {
						out[i] = privacy.BoardPeriod{Board: bp.Board, Period: bp.Period}
					}
					return out, err
				},
				Forget: func(ctx context.Context, def leaderboards.Definition, period, player string) error {
					// A Removed score is how the leaderboard processor forgets
					// an erased player; the job takes the same way.
					return boards.Apply(ctx, def, period, []leaderboards.Score{{PlayerID: player, Removed: true}})
				},
			},
			&privacy.Streaks{
				Store: d.streakStore(),
				Cache: stmirror.New(d.Redis, stGen),
				Gen:   stGen,
			},
			&privacy.Requests{
				Idempotency: d.idempotency(),
				Limits:      &ratelimit.Limiter{Redis: d.Redis, Clock: d.Clock},
				Rules:       rules,
			},
			&privacy.Profile{Players: d.players()},
		},
		Clock:   d.Clock,
		Log:     d.Log,
		Metrics: d.Metrics,
	}
	d.erasures = job
	d.handlers[routes.ErasureProcessor.Function] = job.Process
}

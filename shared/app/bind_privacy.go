package app

import (
	"context"

	"github.com/rallyhq/rally/shared/leaderboards"
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	lbmirror "github.com/rallyhq/rally/shared/leaderboards/mirror"
	"github.com/rallyhq/rally/shared/privacy"
	"github.com/rallyhq/rally/shared/ranking"
	"github.com/rallyhq/rally/shared/ratelimit"
	rxdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	rxmirror "github.com/rallyhq/rally/shared/reactions/mirror"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
	stdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
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
	scores := &lbdynamo.Scores{DB: d.DB, Table: tables.Of(schema.Scores), Events: tables.Of(schema.ScoreEvents), Clock: d.Clock}
	rank := ranking.New(d.Redis)
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
				Edges:  &rxdynamo.Edges{DB: d.DB, Table: tables.Of(schema.Reactions)},
				Counts: &rxdynamo.Counts{DB: d.DB, Table: tables.Of(schema.Counters)},
				Cache:  rxmirror.New(d.Redis, rxGen),
				Gen:    rxGen,
			},
			&privacy.Scores{
				Definitions: &lbdynamo.Definitions{DB: d.DB, Table: tables.Of(schema.Leaderboards), Clock: d.Clock},
				Delete: func(ctx context.Context, player string, boards []string) ([]privacy.BoardPeriod, error) {
					periods, err := scores.ErasePlayer(ctx, player, boards)
					out := make([]privacy.BoardPeriod, len(periods))
					for i, bp := range periods {
						out[i] = privacy.BoardPeriod{Board: bp.Board, Period: bp.Period}
					}
					return out, err
				},
				Forget: func(ctx context.Context, def leaderboards.Definition, period, player string) error {
					return rank.Forget(ctx, lbmirror.Board(def, period), player)
				},
			},
			&privacy.Streaks{
				Store: &stdynamo.Store{DB: d.DB, Streaks: tables.Of(schema.Streaks), Activity: tables.Of(schema.Activity), Clock: d.Clock},
				Cache: stmirror.New(d.Redis, stGen),
				Gen:   stGen,
			},
			&privacy.Requests{
				Idempotency: d.idempotency(),
				Limits:      &ratelimit.Limiter{Redis: d.Redis, Clock: d.Clock},
				Rules:       rules,
			},
			&privacy.Profile{Players: &lbdynamo.Players{DB: d.DB, Table: tables.Of(schema.Players), Clock: d.Clock}},
		},
		Clock:   d.Clock,
		Log:     d.Log,
		Metrics: d.Metrics,
	}
	d.erasures = job
	d.handlers[routes.ErasureProcessor.Function] = job.Process
}

package app

import (
	lbdynamo "github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/obs"
	pldynamo "github.com/rallyhq/rally/shared/players/dynamo"
	rxdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	stdynamo "github.com/rallyhq/rally/shared/streaks/dynamo"
)

// The DynamoDB stores more than one domain binds: the erasure job reaches
// into every domain's tables through the same stores its routes use.

func (d *Deps) edges() *rxdynamo.Edges {
	return &rxdynamo.Edges{DB: d.DB, Table: d.Config.Tables.Of(schema.Reactions), Idempotency: d.idempotency()}
}

func (d *Deps) reactionCounts() *rxdynamo.Counts {
	return &rxdynamo.Counts{DB: d.DB, Table: d.Config.Tables.Of(schema.Counters)}
}

func (d *Deps) boardDefinitions() *lbdynamo.Definitions {
	return &lbdynamo.Definitions{DB: d.DB, Table: d.Config.Tables.Of(schema.Leaderboards), Clock: d.Clock}
}

func (d *Deps) scores() *lbdynamo.Scores {
	tables := d.Config.Tables
	return &lbdynamo.Scores{DB: d.DB, Table: tables.Of(schema.Scores), Events: tables.Of(schema.ScoreEvents), Clock: d.Clock}
}

func (d *Deps) players() *pldynamo.Players {
	return &pldynamo.Players{DB: d.DB, Table: d.Config.Tables.Of(schema.Players), Clock: d.Clock}
}

func (d *Deps) streakStore() *stdynamo.Store {
	tables := d.Config.Tables
	return &stdynamo.Store{
		DB: d.DB, Streaks: tables.Of(schema.Streaks), Activity: tables.Of(schema.Activity), Clock: d.Clock,
		Capacity: func(op string, units float64) {
			d.Metrics.Emit("StreaksCapacityUnits", units, obs.Count, map[string]string{"Operation": op})
		},
	}
}

// Package dynamo stores leaderboards in DynamoDB, their source of truth:
// definitions, each player's score per board and period (changed only by
// conditional transactions that also record the match, so a match id applies
// once), a score-ordered index that answers top N and rank-with-neighbours
// exactly when Redis cannot, and player profiles and friend lists.
package dynamo

import (
	"fmt"

	"github.com/rallyhq/rally/shared/errs"
)

// unavailable classifies a DynamoDB failure: the source of truth cannot be
// reached, which callers answer with 503.
func unavailable(err error, what string) error {
	return errs.Wrap(errs.Unavailable, fmt.Errorf("%s: %w", what, err), "the leaderboards store is unreachable")
}

package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/rallyhq/rally/shared/routes"
)

// One method per service route (shared/routes, Auth Service), named after
// the route. The game routes' methods (PutLeaderboard, SubmitScore,
// PutProfile, PutFriends, PutGame, ReportActivity) take the game-server
// role's or the operator role's credentials; the others are the operator's
// alone, and answer any other signature, a game server's included, with a
// 403 *Error.

// PutLeaderboard defines the leaderboard id, or updates its title, scope,
// status and max_n (PUT /v1/leaderboards/{leaderboard_id}). The answer's
// Created says which.
func (c *Client) PutLeaderboard(ctx context.Context, id string, def LeaderboardDefinition, opts ...CallOption) (*Leaderboard, error) {
	var out Leaderboard
	a, err := c.do(ctx, request{route: routes.PutLeaderboard, args: []string{id}, body: def}, &out, opts)
	if err != nil {
		return nil, err
	}
	out.Created = a.status == http.StatusCreated
	return &out, nil
}

// SubmitScore submits a player's match result to the leaderboard id
// (POST /v1/leaderboards/{leaderboard_id}/scores). The match id makes it
// idempotent: submitting a match again, or a retry whose first answer was
// lost, answers Applied false and changes nothing.
func (c *Client) SubmitScore(ctx context.Context, id string, s ScoreSubmission, opts ...CallOption) (*ScoreResult, error) {
	var out ScoreResult
	if _, err := c.do(ctx, request{route: routes.SubmitScore, args: []string{id}, body: s}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemovePlayerScore takes a player's score (a cheater's) off the
// leaderboard id, in period, or in every period when period is ""
// (DELETE /v1/leaderboards/{leaderboard_id}/players/{player_id}). Their
// matches stay recorded: resending one brings nothing back.
// The operator's alone.
func (c *Client) RemovePlayerScore(ctx context.Context, id, playerID, period string, opts ...CallOption) error {
	var q url.Values
	if period != "" {
		q = url.Values{"period": {period}}
	}
	_, err := c.do(ctx, request{route: routes.RemovePlayerScore, args: []string{id, playerID}, query: q}, nil, opts)
	return err
}

// BanPlayer bans a player from every leaderboard
// (PUT /v1/ops/players/{player_id}/ban): their scores are hidden from
// every read and their submissions refused, until UnbanPlayer.
// The operator's alone.
func (c *Client) BanPlayer(ctx context.Context, playerID string, opts ...CallOption) (*Ban, error) {
	var out Ban
	if _, err := c.do(ctx, request{route: routes.BanPlayer, args: []string{playerID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// UnbanPlayer lifts a player's ban (DELETE /v1/ops/players/{player_id}/ban):
// their scores are back where they rank.
// The operator's alone.
func (c *Client) UnbanPlayer(ctx context.Context, playerID string, opts ...CallOption) (*Ban, error) {
	var out Ban
	if _, err := c.do(ctx, request{route: routes.UnbanPlayer, args: []string{playerID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutProfile sets a player's display name, avatar and region
// (PUT /v1/players/{player_id}/profile).
func (c *Client) PutProfile(ctx context.Context, playerID string, p ProfileUpdate, opts ...CallOption) (*Profile, error) {
	var out Profile
	if _, err := c.do(ctx, request{route: routes.PutProfile, args: []string{playerID}, body: p}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutFriends replaces a player's friend list
// (PUT /v1/players/{player_id}/friends); an empty list clears it.
func (c *Client) PutFriends(ctx context.Context, playerID string, friendIDs []string, opts ...CallOption) (*Friends, error) {
	if friendIDs == nil {
		friendIDs = []string{}
	}
	var out Friends
	if _, err := c.do(ctx, request{route: routes.PutFriends, args: []string{playerID}, body: friendsUpdate{FriendIDs: friendIDs}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutGame sets a game's metadata (PUT /v1/games/{game_id}).
func (c *Client) PutGame(ctx context.Context, gameID string, g GameUpdate, opts ...CallOption) (*Game, error) {
	var out Game
	if _, err := c.do(ctx, request{route: routes.PutGame, args: []string{gameID}, body: g}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReportActivity reports a player's match played or won
// (POST /v1/ops/activity): points, streak and the day's totals change as
// when the player reports their own activity. Each call sends its own
// Idempotency-Key, the same on every retry, so it is recorded once;
// WithIdempotencyKey chooses the key (kept 24 hours, per player). A server
// that may send a report again after the call failed (a crash, a 409 while
// the first attempt is still being recorded) should choose it, e.g. from
// the match and player, so the resend is recognised.
func (c *Client) ReportActivity(ctx context.Context, a ActivityReport, opts ...CallOption) (*ActivityReceipt, error) {
	var out ActivityReceipt
	ans, err := c.do(ctx, request{route: routes.ReportActivity, body: a, keyed: true}, &out, opts)
	if err != nil {
		return nil, err
	}
	out.Replayed = ans.header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// EraseUser asks for a user to be erased everywhere
// (DELETE /v1/ops/users/{user_id}); the erasure runs after the answer
// (GetErasure follows it). Asking again while one is pending answers that
// one.
// The operator's alone.
func (c *Client) EraseUser(ctx context.Context, userID string, opts ...CallOption) (*Erasure, error) {
	var out Erasure
	if _, err := c.do(ctx, request{route: routes.EraseUserByService, args: []string{userID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetErasure is the user's latest erasure
// (GET /v1/ops/users/{user_id}/erasure); a 404 *Error when there is none.
// The operator's alone.
func (c *Client) GetErasure(ctx context.Context, userID string, opts ...CallOption) (*Erasure, error) {
	var out Erasure
	if _, err := c.do(ctx, request{route: routes.ErasureStatusByService, args: []string{userID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExportUser asks for everything Rally holds about a user, as one JSON
// document (POST /v1/ops/users/{user_id}/export); the export runs after
// the answer (GetExport follows it). Asking again while one is pending
// answers that one; a user being erased, or erased, is refused with a 409
// *Error.
// The operator's alone.
func (c *Client) ExportUser(ctx context.Context, userID string, opts ...CallOption) (*Export, error) {
	var out Export
	if _, err := c.do(ctx, request{route: routes.ExportUserByService, args: []string{userID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetExport is one of a user's exports
// (GET /v1/ops/users/{user_id}/exports/{export_id}): once READY, URL reads
// the document until ExpiresAt. A 404 *Error for an unknown or expired
// export.
// The operator's alone.
func (c *Client) GetExport(ctx context.Context, userID, exportID string, opts ...CallOption) (*Export, error) {
	var out Export
	if _, err := c.do(ctx, request{route: routes.ExportStatusByService, args: []string{userID, exportID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health reports whether Redis and DynamoDB answer, each processor's lag
// and parked batches, running jobs, pending erasures and the last
// reconcile (GET /v1/ops/health).
// The operator's alone.
func (c *Client) Health(ctx context.Context, opts ...CallOption) (*Health, error) {
	var out Health
	if _, err := c.do(ctx, request{route: routes.OpsHealth}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartJob starts a rebuild, reconcile or recompute job
// (POST /v1/ops/jobs). A second request would start a second job, so it is
// retried only after an answer that says none started (429, 503).
// The operator's alone.
func (c *Client) StartJob(ctx context.Context, j JobRequest, opts ...CallOption) (*JobStarted, error) {
	var out JobStarted
	if _, err := c.do(ctx, request{route: routes.StartJob, body: j, unsafe: true}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetJob is a job's state, progress and findings
// (GET /v1/ops/jobs/{job_id}).
// The operator's alone.
func (c *Client) GetJob(ctx context.Context, jobID string, opts ...CallOption) (*Job, error) {
	var out Job
	if _, err := c.do(ctx, request{route: routes.GetJob, args: []string{jobID}}, &out, opts); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDeadLetters lists the batches stream processors parked, oldest first
// per processor (GET /v1/ops/dlq): one processor's, or every one's when
// processor is empty.
// The operator's alone.
func (c *Client) ListDeadLetters(ctx context.Context, processor string, opts ...CallOption) ([]ParkedBatch, error) {
	var q url.Values
	if processor != "" {
		q = url.Values{"processor": {processor}}
	}
	var out deadLetters
	if _, err := c.do(ctx, request{route: routes.ListDeadLetters, query: q}, &out, opts); err != nil {
		return nil, err
	}
	return out.Batches, nil
}

// RedriveDeadLetters replays parked batches through their processors and
// removes those that apply (POST /v1/ops/dlq/redrive). Processors apply
// records idempotently, so a replay (or a retried one) never counts twice.
// The operator's alone.
func (c *Client) RedriveDeadLetters(ctx context.Context, which RedriveRequest, opts ...CallOption) ([]RedriveResult, error) {
	var out redriven
	if _, err := c.do(ctx, request{route: routes.RedriveDeadLetters, body: which}, &out, opts); err != nil {
		return nil, err
	}
	return out.Results, nil
}

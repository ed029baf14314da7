package leaderboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/routes"
)

// API serves the leaderboard routes.
type API struct {
	Service *Service
	// Cursors sign and verify the positions of listings.
	Cursors api.Cursors
}

// Limits of the read routes.
const (
	MaxTop     = 1000 // n above a board's max_n is clamped; above this it is refused
	DefaultTop = 10
	// MaxFromRank bounds how deep a page of top may start (from_rank).
	MaxFromRank = 1 << 30
	MaxK        = 50
	// MaxPartitions bounds a definition's partitions (the ranking engine's
	// limit).
	MaxPartitions = 64
	DefaultK      = 4
	// MaxClockSkew is how far in the future a match may say it happened.
	MaxClockSkew = 5 * time.Minute
	// EventRetention is how long a submitted match's id is kept (the
	// ScoreEvents TTL, from when it was recorded).
	EventRetention = 90 * 24 * time.Hour
	// ReplayHorizon is how long ago a match may have happened. A match
	// is recorded at most MaxClockSkew before its occurred_at, so one
	// within the horizon still has its id recorded: on an increment
	// board a replay can never count twice.
	ReplayHorizon = EventRetention - MaxClockSkew
)

type (
	scopeBody struct {
		Game   *string `json:"game,omitempty"`
		Mode   *string `json:"mode,omitempty"`
		Region *string `json:"region,omitempty"`
	}
	definitionRequest struct {
		Title    *string    `json:"title"`
		Policy   *string    `json:"policy"`
		Order    *string    `json:"order"`
		Reset    *string    `json:"reset"`
		TieBreak *string    `json:"tie_break"`
		Scope    *scopeBody `json:"scope"`
		Status   *string    `json:"status"`
		MaxN     *int       `json:"max_n"`
		Timezone *string    `json:"timezone"`
		Regional *bool      `json:"regional"`
		// Partitions is a number, checked by hand: a string is 400.
		Partitions *int `json:"partitions"`
	}
	definitionBody struct {
		ID            string    `json:"leaderboard_id"`
		Title         string    `json:"title"`
		Policy        Policy    `json:"policy"`
		Order         Order     `json:"order"`
		Reset         Reset     `json:"reset"`
		TieBreak      TieBreak  `json:"tie_break"`
		Scope         Scope     `json:"scope"`
		Status        Status    `json:"status"`
		MaxN          int       `json:"max_n"`
		Timezone      string    `json:"timezone"`
		Regional      bool      `json:"regional"`
		Partitions    int       `json:"partitions,omitempty"`
		CreatedAt     time.Time `json:"created_at"`
		UpdatedAt     time.Time `json:"updated_at"`
		CurrentPeriod string    `json:"current_period"`
		Region        string    `json:"region,omitempty"`
		Total         *int64    `json:"total,omitempty"`
		Degraded      bool      `json:"degraded,omitempty"`
	}
	listBody struct {
		Items      []definitionBody `json:"items"`
		NextCursor *string          `json:"next_cursor"`
	}
	submitRequest struct {
		PlayerID   *string         `json:"player_id"`
		MatchID    *string         `json:"match_id"`
		Score      json.RawMessage `json:"score"`
		OccurredAt *string         `json:"occurred_at"`
	}
	submitBody struct {
		PlayerID      string `json:"player_id"`
		Score         int64  `json:"score"`
		PreviousScore *int64 `json:"previous_score"`
		Applied       bool   `json:"applied"`
		Period        string `json:"period"`
		Rank          *int   `json:"rank"`
	}
	topEntry struct {
		Rank        int     `json:"rank"`
		PlayerID    string  `json:"player_id"`
		Score       int64   `json:"score"`
		DisplayName *string `json:"display_name"`
	}
	topBody struct {
		ID       string     `json:"leaderboard_id"`
		Period   string     `json:"period"`
		Region   string     `json:"region,omitempty"`
		Entries  []topEntry `json:"entries"`
		Total    int64      `json:"total"`
		AsOf     time.Time  `json:"as_of"`
		Degraded bool       `json:"degraded,omitempty"`
	}
	neighbor struct {
		Rank     int    `json:"rank"`
		PlayerID string `json:"player_id"`
		Score    int64  `json:"score"`
	}
	rankBody struct {
		PlayerID   string     `json:"player_id"`
		Period     string     `json:"period"`
		Region     string     `json:"region,omitempty"`
		Score      int64      `json:"score"`
		Rank       int        `json:"rank"`
		Percentile float64    `json:"percentile"`
		Total      int64      `json:"total"`
		Neighbors  []neighbor `json:"neighbors"`
		AsOf       time.Time  `json:"as_of"`
		Degraded   bool       `json:"degraded,omitempty"`
		// Approximate and RankError (present together): see Standing.
		Approximate bool   `json:"approximate,omitempty"`
		RankError   *int64 `json:"rank_error,omitempty"`
	}
	friendsBody struct {
		PlayerID     string     `json:"player_id"`
		Period       string     `json:"period"`
		Region       string     `json:"region,omitempty"`
		Score        int64      `json:"score"`
		FriendsRank  int        `json:"friends_rank"`
		FriendsTotal int64      `json:"friends_total"`
		Neighbors    []neighbor `json:"neighbors"`
		AsOf         time.Time  `json:"as_of"`
		Degraded     bool       `json:"degraded,omitempty"`
	}
)

func service(r *api.Request) error {
	_, err := r.Service()
	return err
}

func oneOf[T ~string](f *errs.Fields, field string, v *string, def T, allowed ...T) T {
	if v == nil {
		return def
	}
	for _, a := range allowed {
		if *v == string(a) {
			return a
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	f.Add(field, "must be one of "+strings.Join(names, ", "))
	return def
}

func optionalID(f *errs.Fields, field string, v *string) string {
	if v == nil {
		return ""
	}
	api.CheckID(f, field, *v)
	return *v
}

// PutLeaderboard serves PUT /v1/leaderboards/{leaderboard_id}.
func (a *API) PutLeaderboard(ctx context.Context, r *api.Request) (api.Response, error) {
	if err := service(r); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id := r.Path("leaderboard_id")
	api.CheckID(&f, "leaderboard_id", id)
	var in definitionRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	d := Definition{ID: id, MaxN: 100, Timezone: "UTC"}
	switch {
	case in.Title == nil:
		f.Add("title", "is required")
	case strings.TrimSpace(*in.Title) == "" || utf8.RuneCountInString(*in.Title) > 200:
		f.Add("title", "must be 1-200 characters")
	default:
		d.Title = *in.Title
	}
	d.Policy = oneOf(&f, "policy", in.Policy, Best, Best, Increment, Latest)
	d.Order = oneOf(&f, "order", in.Order, Desc, Desc, Asc)
	d.Reset = oneOf(&f, "reset", in.Reset, Never, Never, Daily, Weekly, Monthly)
	d.TieBreak = oneOf(&f, "tie_break", in.TieBreak, Earliest, Earliest, Shared)
	d.Status = oneOf(&f, "status", in.Status, Active, Active, Frozen, Archived)
	if in.Scope != nil {
		d.Scope = Scope{
			Game:   optionalID(&f, "scope.game", in.Scope.Game),
			Mode:   optionalID(&f, "scope.mode", in.Scope.Mode),
			Region: optionalID(&f, "scope.region", in.Scope.Region),
		}
	}
	if in.MaxN != nil {
		if *in.MaxN < 1 || *in.MaxN > MaxTop {
			f.Add("max_n", "must be from 1 to 1000")
		} else {
			d.MaxN = *in.MaxN
		}
	}
	if in.Timezone != nil {
		if _, err := time.LoadLocation(*in.Timezone); err != nil || *in.Timezone == "" || *in.Timezone == "Local" {
			f.Add("timezone", "must be an IANA time zone such as UTC or Europe/Berlin")
		} else {
			d.Timezone = *in.Timezone
		}
	}
	if in.Regional != nil {
		d.Regional = *in.Regional
	}
	if in.Partitions != nil {
		if *in.Partitions < 1 || *in.Partitions > MaxPartitions {
			f.Add("partitions", fmt.Sprintf("must be from 1 to %d", MaxPartitions))
		} else {
			d.Partitions = *in.Partitions
		}
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	stored, created, err := a.Service.PutDefinition(ctx, d)
	if err != nil {
		return api.Response{}, err
	}
	resp := api.OK(definitionOf(stored, a.Service.Clock.Now()))
	if created {
		resp.Status = http.StatusCreated
	}
	return resp, nil
}

func definitionOf(d Definition, now time.Time) definitionBody {
	return definitionBody{
		ID: d.ID, Title: d.Title, Policy: d.Policy, Order: d.Order, Reset: d.Reset, TieBreak: d.TieBreak,
		Scope: d.Scope, Status: d.Status, MaxN: d.MaxN, Timezone: d.Timezone, Regional: d.Regional,
		Partitions: d.Partitions, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, CurrentPeriod: d.PeriodAt(now),
	}
}

// Limits of the listing of boards.
const (
	DefaultList = 50
	MaxList     = 100
)

// ListLeaderboards serves GET /v1/leaderboards: the boards of a game
// (scope.game) and status, a page at a time.
func (a *API) ListLeaderboards(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	var filter Filter
	if game, asked := r.Event.QueryStringParameters["game"]; asked {
		api.CheckID(&f, "game", game)
		filter.Game = game
	}
	if status, asked := r.Event.QueryStringParameters["status"]; asked {
		filter.Status = oneOf(&f, "status", &status, "", Active, Frozen, Archived)
	}
	limit := r.IntQuery(&f, "limit", DefaultList, 1, MaxList)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	// A cursor is good for the listing it came from only.
	scope := fmt.Sprintf("%s:%s:%s", routes.ListLeaderboards.Function, filter.Game, filter.Status)
	var after string
	if cur := r.Query("cursor"); cur != "" {
		if err := a.Cursors.Decode(ctx, scope, cur, &after); err != nil {
			return api.Response{}, err
		}
	}
	defs, next, err := a.Service.List(ctx, filter, after, limit)
	if err != nil {
		return api.Response{}, err
	}
	now := a.Service.Clock.Now()
	body := listBody{Items: make([]definitionBody, len(defs))}
	for i, d := range defs {
		body.Items[i] = definitionOf(d, now)
	}
	if next != "" {
		cur, err := a.Cursors.Encode(scope, next)
		if err != nil {
			return api.Response{}, err
		}
		body.NextCursor = &cur
	}
	return api.OK(body), nil
}

// GetLeaderboard serves GET /v1/leaderboards/{leaderboard_id}.
func (a *API) GetLeaderboard(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id := r.Path("leaderboard_id")
	api.CheckID(&f, "leaderboard_id", id)
	region := regionArg(r, &f)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	b, err := a.Service.Board(ctx, id, region)
	if err != nil {
		return api.Response{}, err
	}
	body := definitionOf(b.Definition, a.Service.Clock.Now())
	body.Region, body.Total, body.Degraded = region, &b.Total, b.Degraded
	return api.OK(body), nil
}

// SubmitScore serves POST /v1/leaderboards/{leaderboard_id}/scores.
func (a *API) SubmitScore(ctx context.Context, r *api.Request) (api.Response, error) {
	if err := service(r); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id := r.Path("leaderboard_id")
	api.CheckID(&f, "leaderboard_id", id)
	var in submitRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	var m Match
	if in.PlayerID == nil {
		f.Add("player_id", "is required")
	} else {
		m.PlayerID = *in.PlayerID
		api.CheckID(&f, "player_id", m.PlayerID)
	}
	if in.MatchID == nil {
		f.Add("match_id", "is required")
	} else {
		m.MatchID = *in.MatchID
		api.CheckID(&f, "match_id", m.MatchID)
	}
	m.Score = parseScore(&f, in.Score)
	if in.OccurredAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.OccurredAt)
		switch {
		case err != nil:
			f.Add("occurred_at", "must be an RFC 3339 time")
		case t.After(a.Service.Clock.Now().Add(MaxClockSkew)):
			f.Add("occurred_at", "must not be in the future")
		default:
			m.OccurredAt = t
		}
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	res, err := a.Service.Submit(ctx, id, m)
	if err != nil {
		return api.Response{}, err
	}
	body := submitBody{PlayerID: m.PlayerID, Score: res.Current.Score, Applied: res.Applied, Period: res.Period, Rank: res.Rank}
	if res.Previous != nil {
		prev := res.Previous.Score
		body.PreviousScore = &prev
	}
	return api.OK(body), nil
}

// parseScore accepts an integer with |score| ≤ 2^53 and nothing else: not
// a fraction, not a string, not an exponent that hides a fraction.
func parseScore(f *errs.Fields, raw json.RawMessage) int64 {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		f.Add("score", "is required")
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		f.Add("score", "must be an integer")
		return 0
	}
	if n > MaxScore || n < -MaxScore {
		f.Add("score", "must be within ±2^53 (9007199254740992)")
		return 0
	}
	return n
}

// readArgs validates the common read inputs: the board, an optional
// region and period, and an integer parameter.
func readArgs(r *api.Request, f *errs.Fields, intName string, def, maxV int) (id, region, period string, v int) {
	id = r.Path("leaderboard_id")
	api.CheckID(f, "leaderboard_id", id)
	period = r.Query("period")
	if _, asked := r.Event.QueryStringParameters["period"]; asked && period == "" {
		f.Add("period", "must name a period")
	}
	lowest := 0
	if intName == "n" {
		lowest = 1
	}
	return id, regionArg(r, f), period, r.IntQuery(f, intName, def, lowest, maxV)
}

// regionArg validates an optional region= (a regional board's view).
func regionArg(r *api.Request, f *errs.Fields) string {
	region, asked := r.Event.QueryStringParameters["region"]
	if asked {
		api.CheckID(f, "region", region)
	}
	return region
}

// LeaderboardTop serves GET /v1/leaderboards/{leaderboard_id}/top.
func (a *API) LeaderboardTop(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id, region, period, n := readArgs(r, &f, "n", DefaultTop, MaxTop)
	from := r.IntQuery(&f, "from_rank", 1, 1, MaxFromRank)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	t, err := a.Service.Top(ctx, id, region, period, from, n)
	if err != nil {
		return api.Response{}, err
	}
	body := topBody{ID: id, Period: t.Period, Region: region, Entries: make([]topEntry, len(t.Entries)), Total: t.Total, AsOf: t.AsOf, Degraded: t.Degraded}
	for i, e := range t.Entries {
		body.Entries[i] = topEntry{Rank: e.Rank, PlayerID: e.PlayerID, Score: e.Score}
		if name, ok := t.Names[e.PlayerID]; ok {
			body.Entries[i].DisplayName = &name
		}
	}
	return api.OK(body), nil
}

func playerArg(r *api.Request, f *errs.Fields) string {
	p := r.Path("player_id")
	api.CheckID(f, "player_id", p)
	return p
}

func neighbors(es []Entry) []neighbor {
	out := make([]neighbor, len(es))
	for i, e := range es {
		out[i] = neighbor{Rank: e.Rank, PlayerID: e.PlayerID, Score: e.Score}
	}
	return out
}

// RemovePlayerScore serves DELETE /v1/leaderboards/{leaderboard_id}/players/{player_id}:
// a cheater's score leaves the board, in period= or in every period.
func (a *API) RemovePlayerScore(ctx context.Context, r *api.Request) (api.Response, error) {
	if err := service(r); err != nil {
		return api.Response{}, err
	}
	if err := r.NoBody(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id := r.Path("leaderboard_id")
	api.CheckID(&f, "leaderboard_id", id)
	player := playerArg(r, &f)
	period, asked := r.Event.QueryStringParameters["period"]
	if asked && period == "" {
		f.Add("period", "must name a period")
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	if err := a.Service.RemovePlayer(ctx, id, player, period); err != nil {
		return api.Response{}, err
	}
	return api.Response{Status: http.StatusNoContent}, nil
}

// banBody answers a ban or an unban.
type banBody struct {
	PlayerID string     `json:"player_id"`
	Banned   bool       `json:"banned"`
	BannedAt *time.Time `json:"banned_at"`
}

// BanPlayer serves PUT /v1/ops/players/{player_id}/ban.
func (a *API) BanPlayer(ctx context.Context, r *api.Request) (api.Response, error) {
	player, err := banTarget(r)
	if err != nil {
		return api.Response{}, err
	}
	since, err := a.Service.Ban(ctx, player)
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(banBody{PlayerID: player, Banned: true, BannedAt: &since}), nil
}

// UnbanPlayer serves DELETE /v1/ops/players/{player_id}/ban.
func (a *API) UnbanPlayer(ctx context.Context, r *api.Request) (api.Response, error) {
	player, err := banTarget(r)
	if err != nil {
		return api.Response{}, err
	}
	if err := a.Service.Unban(ctx, player); err != nil {
		return api.Response{}, err
	}
	return api.OK(banBody{PlayerID: player}), nil
}

func banTarget(r *api.Request) (string, error) {
	if err := service(r); err != nil {
		return "", err
	}
	if err := r.NoBody(); err != nil {
		return "", err
	}
	var f errs.Fields
	player := playerArg(r, &f)
	return player, f.Err()
}

// PlayerRank serves GET /v1/leaderboards/{leaderboard_id}/players/{player_id}/rank.
func (a *API) PlayerRank(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id, region, period, k := readArgs(r, &f, "k", DefaultK, MaxK)
	player := playerArg(r, &f)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	st, err := a.Service.Rank(ctx, id, region, period, player, k)
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(rankBody{
		PlayerID: player, Period: st.Period, Region: region, Score: st.Self.Score, Rank: st.Self.Rank, Percentile: st.Percentile,
		Total: st.Total, Neighbors: neighbors(st.Neighbors), AsOf: st.AsOf, Degraded: st.Degraded,
		Approximate: st.Approximate, RankError: rankError(st),
	}), nil
}

// rankError is the bound of an estimated rank, nil for an exact one.
func rankError(st Standing) *int64 {
	if !st.Approximate {
		return nil
	}
	return &st.RankError
}

// FriendsRank serves GET /v1/leaderboards/{leaderboard_id}/players/{player_id}/friends-rank:
// a player's own rank among their friends. A player's friends are theirs to
// see, so anyone else is refused.
func (a *API) FriendsRank(ctx context.Context, r *api.Request) (api.Response, error) {
	caller, err := r.Player()
	if err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	id, region, period, k := readArgs(r, &f, "k", DefaultK, MaxK)
	player := playerArg(r, &f)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	if player != caller {
		return api.Response{}, errs.New(errs.Forbidden, "players read their own rank among friends only")
	}
	st, err := a.Service.FriendsRank(ctx, id, region, period, player, k)
	if err != nil {
		return api.Response{}, err
	}
	return api.OK(friendsBody{
		PlayerID: player, Period: st.Period, Region: region, Score: st.Self.Score, FriendsRank: st.Self.Rank, FriendsTotal: st.Total,
		Neighbors: neighbors(st.Neighbors), AsOf: st.AsOf, Degraded: st.Degraded,
	}), nil
}

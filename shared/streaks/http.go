package streaks

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/routes"
)

// API serves the streak and points routes.
type API struct {
	Service *Service
}

// Limits of the read routes.
const (
	MaxHistoryDays     = 90
	DefaultHistoryDays = 30
	MaxTop             = 100
	DefaultTop         = 10
)

type (
	activityRequest struct {
		EventType *string `json:"event_type"`
		Source    *string `json:"source"`
		Timezone  *string `json:"timezone"`
		// UserID is the player a game server reports for; a player may
		// name themselves, anyone else is refused.
		UserID *string `json:"user_id"`
	}
	// publicStreak is what anyone may read of a player's streak.
	publicStreak struct {
		UserID        string `json:"user_id"`
		CurrentStreak int64  `json:"current_streak"`
		LongestStreak int64  `json:"longest_streak"`
		ActiveToday   bool   `json:"active_today"`
		AtRisk        bool   `json:"at_risk"`
		Degraded      bool   `json:"degraded,omitempty"`
	}
	// ownStreak adds what only the player reads of their own: when they
	// were last active, their time zone and their points.
	ownStreak struct {
		publicStreak
		LastActivityDate *string `json:"last_activity_date"`
		Timezone         string  `json:"timezone"`
		TotalPoints      int64   `json:"total_points"`
	}
	dayBody struct {
		Date   string `json:"date"`
		Points int64  `json:"points"`
		Events int64  `json:"events"`
	}
	historyBody struct {
		UserID string    `json:"user_id"`
		Days   []dayBody `json:"days"`
	}
	topEntry struct {
		Rank          int    `json:"rank"`
		UserID        string `json:"user_id"`
		CurrentStreak int64  `json:"current_streak"`
	}
	topBody struct {
		Region   *string    `json:"region"`
		Entries  []topEntry `json:"entries"`
		AsOf     time.Time  `json:"as_of"`
		Degraded bool       `json:"degraded,omitempty"`
	}
)

// names lists the string values of an enumeration, for messages.
func names[T ~string](vs []T) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}

// parseActivity validates the fields of an activity request body, adding
// what is wrong to f.
func parseActivity(f *errs.Fields, in activityRequest) Activity {
	var a Activity
	switch {
	case in.EventType == nil:
		f.Add("event_type", "is required")
	case !known(EventType(*in.EventType)):
		f.Add("event_type", "must be one of "+names(EventTypes()))
	default:
		a.Type = EventType(*in.EventType)
	}
	switch {
	case in.Source == nil:
		f.Add("source", "is required")
	default:
		for _, s := range Sources() {
			if *in.Source == string(s) {
				a.Source = s
			}
		}
		if a.Source == "" {
			f.Add("source", "must be one of "+names(Sources()))
		}
	}
	if in.Timezone != nil {
		if loc, err := Zone(*in.Timezone); err != nil || loc == nil || *in.Timezone == "" {
			f.Add("timezone", "must be an IANA time zone such as UTC or Europe/Berlin")
		} else {
			a.Timezone = *in.Timezone
		}
	}
	return a
}

// notReportable refuses an event type that by may not report, saying who
// reports it and where.
func notReportable(t EventType, by Reporter) error {
	award, _ := AwardFor(t)
	where := map[Reporter]string{Players: routes.RecordActivity.Key(), GameServers: routes.ReportActivity.Key()}
	if r := award.ReportedBy; r == Players || r == GameServers {
		return errs.New(errs.Forbidden, "%s is reported by %s through %s, not by %s", t, r, where[r], by)
	}
	return errs.New(errs.Forbidden, "%s is not reported by %s", t, by)
}

// RecordActivity serves POST /v1/activity: a player reports their own
// activity, of the event types the points table leaves to players.
func (a *API) RecordActivity(ctx context.Context, r *api.Request) (api.Response, error) {
	user, err := r.Player()
	if err != nil {
		return api.Response{}, err
	}
	var in activityRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	key, err := r.IdempotencyKey(true)
	if err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	act := parseActivity(&f, in)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	if in.UserID != nil && *in.UserID != user {
		return api.Response{}, errs.New(errs.Forbidden, "players record their own activity only")
	}
	act.By = Players
	return a.record(ctx, r, user, key, act)
}

// ReportActivity serves POST /v1/ops/activity: a game server reports a
// player's activity, of the event types the points table gives to game
// servers (the competitive ones: matches played and won). Its
// Idempotency-Key is the server's own, per player.
func (a *API) ReportActivity(ctx context.Context, r *api.Request) (api.Response, error) {
	server, err := r.Service()
	if err != nil {
		return api.Response{}, err
	}
	var in activityRequest
	if err := r.Decode(&in); err != nil {
		return api.Response{}, err
	}
	key, err := r.IdempotencyKey(true)
	if err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	var user string
	if in.UserID == nil {
		f.Add("user_id", "is required")
	} else {
		user = *in.UserID
		api.CheckID(&f, "user_id", user)
	}
	act := parseActivity(&f, in)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	act.By = GameServers
	return a.record(ctx, r, user, ServerKey(server, key), act)
}

// record records act for user and answers with the receipt, or the first
// one when key was already used.
func (a *API) record(ctx context.Context, r *api.Request, user, key string, act Activity) (api.Response, error) {
	rec, err := a.Service.Record(ctx, user, key, r.IdempotencyHash(), act)
	if err != nil {
		return api.Response{}, err
	}
	resp := api.OK(json.RawMessage(rec.Body))
	if rec.Replayed {
		resp.Headers = map[string]string{"Idempotent-Replayed": "true"}
	}
	return resp, nil
}

func userArg(r *api.Request) (string, error) {
	var f errs.Fields
	user := r.Path("user_id")
	api.CheckID(&f, "user_id", user)
	return user, f.Err()
}

// GetStreak serves GET /v1/users/{user_id}/streak. Anyone reads a
// player's streak numbers; only the player reads their last activity
// date, time zone and points, which are left out for everyone else.
func (a *API) GetStreak(ctx context.Context, r *api.Request) (api.Response, error) {
	caller, err := r.Player()
	if err != nil {
		return api.Response{}, err
	}
	user, err := userArg(r)
	if err != nil {
		return api.Response{}, err
	}
	s, err := a.Service.Get(ctx, user)
	if err != nil {
		return api.Response{}, err
	}
	public := publicStreak{
		UserID: user, CurrentStreak: s.View.Current, LongestStreak: s.Longest,
		ActiveToday: s.ActiveToday, AtRisk: s.AtRisk, Degraded: s.Degraded,
	}
	if caller != user {
		return api.OK(public), nil
	}
	own := ownStreak{publicStreak: public, Timezone: s.Timezone, TotalPoints: s.TotalPoints}
	if own.Timezone == "" {
		own.Timezone = "UTC"
	}
	if s.LastDate != "" {
		own.LastActivityDate = &s.LastDate
	}
	return api.OK(own), nil
}

// PointsHistory serves GET /v1/users/{user_id}/points/history: a player
// reads their own.
func (a *API) PointsHistory(ctx context.Context, r *api.Request) (api.Response, error) {
	caller, err := r.Player()
	if err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	user := r.Path("user_id")
	api.CheckID(&f, "user_id", user)
	days := r.IntQuery(&f, "days", DefaultHistoryDays, 1, MaxHistoryDays)
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	if user != caller {
		return api.Response{}, errs.New(errs.Forbidden, "players read their own points history only")
	}
	history, err := a.Service.History(ctx, user, days)
	if err != nil {
		return api.Response{}, err
	}
	body := historyBody{UserID: user, Days: make([]dayBody, len(history))}
	for i, d := range history {
		body.Days[i] = dayBody{Date: d.Date, Points: d.Points, Events: d.Events}
	}
	return api.OK(body), nil
}

// StreaksTop serves GET /v1/streaks/top.
func (a *API) StreaksTop(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
		return api.Response{}, err
	}
	var f errs.Fields
	n := r.IntQuery(&f, "n", DefaultTop, 1, MaxTop)
	region, asked := r.Event.QueryStringParameters["region"]
	if asked {
		api.CheckID(&f, "region", region)
	}
	if err := f.Err(); err != nil {
		return api.Response{}, err
	}
	top, err := a.Service.Top(ctx, region, n)
	if err != nil {
		return api.Response{}, err
	}
	body := topBody{Entries: make([]topEntry, len(top.Entries)), AsOf: top.AsOf, Degraded: top.Degraded}
	if region != "" {
		body.Region = &region
	}
	for i, e := range top.Entries {
		body.Entries[i] = topEntry{Rank: e.Rank, UserID: e.UserID, CurrentStreak: e.Streak}
	}
	return api.OK(body), nil
}

func known(t EventType) bool {
	_, ok := AwardFor(t)
	return ok
}

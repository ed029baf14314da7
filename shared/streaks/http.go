package streaks

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
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
		// UserID may name the caller; anyone else is refused.
		UserID *string `json:"user_id"`
	}
	streakBody struct {
		UserID           string  `json:"user_id"`
		CurrentStreak    int64   `json:"current_streak"`
		LongestStreak    int64   `json:"longest_streak"`
		LastActivityDate *string `json:"last_activity_date"`
		Timezone         string  `json:"timezone"`
		TotalPoints      int64   `json:"total_points"`
		ActiveToday      bool    `json:"active_today"`
		AtRisk           bool    `json:"at_risk"`
		Degraded         bool    `json:"degraded,omitempty"`
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

func eventTypes() []EventType {
	return []EventType{DailyOpen, MatchPlayed, MatchWon, LevelCompleted, SocialShare}
}

// parseActivity validates an activity request body for user.
func parseActivity(in activityRequest, user string) (Activity, error) {
	var f errs.Fields
	var a Activity
	switch {
	case in.EventType == nil:
		f.Add("event_type", "is required")
	case !known(EventType(*in.EventType)):
		f.Add("event_type", "must be one of "+names(eventTypes()))
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
	if err := f.Err(); err != nil {
		return Activity{}, err
	}
	if in.UserID != nil && *in.UserID != user {
		return Activity{}, errs.New(errs.Forbidden, "players record their own activity only")
	}
	return a, nil
}

// RecordActivity serves POST /v1/activity.
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
	act, err := parseActivity(in, user)
	if err != nil {
		return api.Response{}, err
	}
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

// GetStreak serves GET /v1/users/{user_id}/streak.
func (a *API) GetStreak(ctx context.Context, r *api.Request) (api.Response, error) {
	if _, err := r.Player(); err != nil {
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
	body := streakBody{
		UserID: user, CurrentStreak: s.View.Current, LongestStreak: s.Longest, Timezone: s.Timezone,
		TotalPoints: s.TotalPoints, ActiveToday: s.ActiveToday, AtRisk: s.AtRisk, Degraded: s.Degraded,
	}
	if body.Timezone == "" {
		body.Timezone = "UTC"
	}
	if s.LastDate != "" {
		body.LastActivityDate = &s.LastDate
	}
	return api.OK(body), nil
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

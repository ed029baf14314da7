package app

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/accounts"
	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/ratelimit"
	"github.com/rallyhq/rally/shared/routes"
)

// MetricRateLimited counts the requests a function refused with 429, by
// budget.
const MetricRateLimited = "RateLimited"

// gate spends a request's budgets (routes.Route.Budgets), the calling
// role's among the allowed ones on service routes, before next runs:
// over budget, it answers 429 with Retry-After; either way the answer
// carries the RateLimit headers of the most constrained budget. On player
// routes it also looks up the caller's account age, which halves the
// player's budget for a young account and rides in the context for the
// fraud controls (accounts.Young).
func (d *Deps) gate(r routes.Route, allowed api.ServiceRoles, next api.Handler) api.Handler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		var checks []ratelimit.Check
		var unseen string // a player Rally has not seen yet
		caller, _ := (&api.Request{Event: ev, ServiceRoles: allowed}).Caller()
		for _, b := range r.Budgets() {
			c := ratelimit.Check{Name: b.Name, PerMinute: d.Config.Budget(b)}
			switch {
			case b == routes.IPBudget:
				c.Subject = ev.RequestContext.HTTP.SourceIP
			case r.Auth == routes.Service:
				c.Subject = api.Principal(caller.Service)
			case caller.Player != "" && api.ValidID(caller.Player):
				c.Subject = caller.Player
				age := d.Accounts().Of(ctx, caller.Player, d.Config.YoungAccountAge)
				ctx = accounts.With(ctx, age)
				if d.Config.YoungAccountAge > 0 && age.FirstSeen.IsZero() {
					unseen = caller.Player
				}
				if age.Young && c.PerMinute > 0 { // 0: the budget is off
					c.PerMinute = max(1, c.PerMinute/2)
				}
			}
			checks = append(checks, c)
		}
		var decision ratelimit.Decision
		if r.BudgetsInRedis() {
			decision = d.limiter.Allow(ctx, checks...)
		} else {
			decision = d.limiter.AllowInProcess(checks...)
		}
		if !decision.Allowed {
			d.Metrics.Count(MetricRateLimited, 1, map[string]string{"Budget": decision.Budget})
			out := api.Encode(api.ProblemFor(decision.Err()))
			rateHeaders(out.Headers, decision)
			return out, nil
		}
		out, err := next(ctx, ev)
		if unseen != "" && out.StatusCode < 300 && err == nil {
			if err := d.Accounts().Seen(ctx, unseen); err != nil {
				d.Log.WarnContext(ctx, "first-seen time not recorded", "error", err.Error())
			}
		}
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		rateHeaders(out.Headers, decision)
		return out, err
	}
}

// rateHeaders sets the RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset headers (seconds until the budget is whole again).
func rateHeaders(h map[string]string, d ratelimit.Decision) {
	if d.Limit <= 0 {
		return
	}
	h["RateLimit-Limit"] = strconv.Itoa(d.Limit)
	h["RateLimit-Remaining"] = strconv.Itoa(d.Remaining)
	h["RateLimit-Reset"] = strconv.Itoa(int((d.Reset + time.Second - 1) / time.Second))
}

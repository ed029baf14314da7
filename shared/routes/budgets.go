package routes

// Budget is a request budget: at most PerMinute requests a minute from one
// caller, enforced with GCRA (shared/ratelimit), so a caller may spend the
// whole budget at once and then earns one request back every minute /
// PerMinute. Routes that share a Name share one budget: favoriting and
// unfavoriting draw on the same 30.
type Budget struct {
	Name      string
	PerMinute int
}

// Budgets of player routes, per player. An account younger than the
// young-account age gets half of each (shared/accounts).
var (
	FavoriteBudget = Budget{Name: "favorite", PerMinute: 30}
	LikeBudget     = Budget{Name: "like", PerMinute: 60}
	ActivityBudget = Budget{Name: "activity", PerMinute: 60}
	ErasureBudget  = Budget{Name: "erasure", PerMinute: 5}
	// ExportBudget bounds export requests: each reads everything Rally
	// holds about the player.
	ExportBudget = Budget{Name: "export", PerMinute: 5}
	ReadBudget   = Budget{Name: "read", PerMinute: 600}
)

// IPBudget is every player route's budget per source IP, beside the
// player's own: it bounds what one address gets however many tokens it
// holds. Service routes are not counted per IP: game servers share a few
// NAT addresses, and each calling role has its own budget instead.
var IPBudget = Budget{Name: "ip", PerMinute: 1200}

// ServiceBudget is the budget of each calling role on service routes.
var ServiceBudget = Budget{Name: "service", PerMinute: 60000}

// PlayerBudgets lists the per-player budgets, each once.
func PlayerBudgets() []Budget {
	return []Budget{FavoriteBudget, LikeBudget, ActivityBudget, ErasureBudget, ExportBudget, ReadBudget}
}

// AllBudgets lists every budget: the per-player ones, then per IP and per
// service role.
func AllBudgets() []Budget {
	return append(PlayerBudgets(), IPBudget, ServiceBudget)
}

// Budgets returns what a call of r is counted against: its own budget (per
// player or per calling role) and, on player routes, the per-IP one.
func (r Route) Budgets() []Budget {
	if r.Auth == Service {
		return []Budget{r.Budget}
	}
	return []Budget{r.Budget, IPBudget}
}

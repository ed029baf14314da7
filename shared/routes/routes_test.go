package routes

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyhq/rally/shared/schema"
)

// Every declared function has a functions/<name>/main.go, every function
// directory is declared, and each main starts the declaration named after
// its directory (favorite-game → routes.FavoriteGame).
func TestEveryFunctionHasADirectoryAndEveryDirectoryAFunction(t *testing.T) {
	dir := filepath.Join("..", "..", "functions")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, f := range Functions() {
		if declared[f] {
			t.Errorf("function %s declared twice", f)
		}
		declared[f] = true
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		onDisk[e.Name()] = true
		if !declared[e.Name()] {
			t.Errorf("functions/%s has no route or stream processor", e.Name())
			continue
		}
		main := filepath.Join(dir, e.Name(), "main.go")
		if got, want := startedDeclaration(t, main), Camel(e.Name()); got != want {
			t.Errorf("%s starts routes.%s, want routes.%s", main, got, want)
		}
	}
	for f := range declared {
		if !onDisk[f] {
			t.Errorf("function %s has no functions/%s/main.go", f, f)
		}
	}
}

func TestRouteKeysAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range All() {
		if seen[r.Key()] {
			t.Errorf("route %s declared twice", r.Key())
		}
		seen[r.Key()] = true
		if r.Auth != Player && r.Auth != Service {
			t.Errorf("route %s has no auth kind", r.Key())
		}
	}
}

// startedDeclaration returns X in the routes.X selector used by main.go.
func startedDeclaration(t *testing.T, path string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	found := ""
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "routes" {
				found = sel.Sel.Name
			}
		}
		return true
	})
	return found
}

// Event source mappings take batching windows in whole seconds (at most
// 300) and schedules take whole minutes.
func TestProcessorSettingsAreDeployable(t *testing.T) {
	for _, p := range Processors() {
		if p.BatchWindow%time.Second != 0 || p.BatchWindow > 300*time.Second {
			t.Errorf("%s: batch window %v is not a whole number of seconds up to 300", p.Function, p.BatchWindow)
		}
		if p.Tick%time.Minute != 0 {
			t.Errorf("%s: tick %v is not a whole number of minutes", p.Function, p.Tick)
		}
		if p.BatchSize < 1 || p.BatchSize > 10000 || p.MaxRetries < 0 || p.MaxRetries > 10000 || p.MaxRecordAge <= 0 || p.MaxRecordAge > MaxParkAge {
			t.Errorf("%s: batch size, retries or record age out of the event source mapping's range", p.Function)
		}
	}
}

// Every route spends a budget: a player route its player budget and the
// per-IP one, a service route its calling role's; none is unlimited.
func TestEveryRouteHasABudget(t *testing.T) {
	players := map[Budget]bool{}
	for _, b := range PlayerBudgets() {
		players[b] = true
	}
	for _, r := range All() {
		switch {
		case r.Budget.PerMinute <= 0 || r.Budget.Name == "":
			t.Errorf("%s: no budget", r.Key())
		case r.Auth == Player && !players[r.Budget]:
			t.Errorf("%s: a player route spends %q, not a per-player budget", r.Key(), r.Budget.Name)
		case r.Auth == Service && r.Budget != ServiceBudget:
			t.Errorf("%s: a service route spends %q, not the calling role's", r.Key(), r.Budget.Name)
		}
		if r.Auth == Player && (r.Method == "GET") != (r.Budget == ReadBudget) {
			t.Errorf("%s: reads, and only reads, spend the read budget", r.Key())
		}
		if r.Auth == Player && !slices.Contains(r.Budgets(), IPBudget) {
			t.Errorf("%s: a player route is not counted per IP", r.Key())
		}
	}
}

// budgetRows is the README's budget table as the declarations make it.
func budgetRows() []string {
	var rows []string
	for _, b := range AllBudgets() {
		per, young := "player", fmt.Sprintf(" (%d for a young account)", max(1, b.PerMinute/2))
		switch b {
		case IPBudget:
			per, young = "source IP", ""
		case ServiceBudget:
			per, young = "calling role", ""
		}
		var keys []string
		for _, r := range All() {
			if r.Budget == b || (b == IPBudget && slices.Contains(r.Budgets(), IPBudget)) {
				keys = append(keys, "`"+r.Key()+"`")
			}
		}
		switch b {
		case ReadBudget:
			keys = []string{"every player `GET` route"}
		case IPBudget:
			keys = []string{"every player route"}
		}
		if b == ServiceBudget {
			keys = []string{"every service route"}
		}
		rows = append(rows, fmt.Sprintf("| `%s` | %s | %d%s | %s |", b.Name, per, b.PerMinute, young, strings.Join(keys, ", ")))
	}
	return rows
}

// The README's budget table is the declared one.
func TestReadmeListsTheBudgets(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range budgetRows() {
		if !strings.Contains(string(readme), row+"\n") {
			t.Errorf("README.md lacks the budget row\n%s", row)
		}
	}
}

// Whoever reads a user's analytics secret can tie their exported events
// back to them: only the analytics shipper (which creates secrets) and the
// erasure processor (which deletes them, reading none) touch the table,
// and no function but the shipper reads anything of Players beside it.
func TestOnlyTheShipperAndTheErasureProcessorTouchAnalyticsSecrets(t *testing.T) {
	allowed := map[string]bool{AnalyticsShipper.Function: true, ErasureProcessor.Function: true}
	check := func(fn string, u Uses) {
		for _, tb := range u.Tables() {
			if tb.Name == schema.AnalyticsSecrets.Name && !allowed[fn] {
				t.Errorf("%s uses %s", fn, tb.Name)
			}
		}
	}
	for _, r := range All() {
		check(r.Function, r.Uses)
	}
	for _, p := range Processors() {
		check(p.Function, p.Uses)
	}
	for _, c := range Consumers() {
		check(c.Function, c.Uses)
	}
	for _, c := range ErasureProcessor.Uses.Calls {
		if c.Table.Name == schema.AnalyticsSecrets.Name && c.Actions != DeleteItem {
			t.Errorf("the erasure processor may %v analytics secrets; it only deletes them", c.Actions)
		}
	}
	for _, p := range []Processor{AnalyticsShipper, AnalyticsScoreEvents, AnalyticsActivity} {
		for _, c := range p.Uses.Calls {
			if c.Table.Name == schema.Players.Name && !slices.Equal(c.Attributes, []string{schema.AttrAnalyticsSecret}) {
				t.Errorf("the shipper reads whole Players items; it needs only the legacy secret")
			}
		}
	}
}

// Erasure records are kept under hashes keyed by the erasure key: a
// function that addresses one by its key (not the by_pending index, which
// lists them) reads that key. (Others may too: whatever must name an
// erased user without naming them is keyed by it.)
func TestFunctionsThatLookErasuresUpReadTheErasureKey(t *testing.T) {
	for _, fn := range Functions() {
		u, _ := UsesOf(fn)
		byKey := slices.ContainsFunc(u.Calls, func(c Call) bool { return c.Table.Name == schema.Erasures.Name && c.Index == "" })
		if byKey && !slices.Contains(u.Secrets, ErasureKey) {
			t.Errorf("%s addresses erasure records by their key, but does not read the erasure key", fn)
		}
		if !slices.Contains(u.Keys(), LogKey) {
			t.Errorf("%s does not read the log key", fn)
		}
	}
}

// Every call names actions, on a declared index of its table if any, and
// an index only Query and Scan: a grant the stack can build and IAM
// evaluates.
func TestEveryCallNamesItsActionsOnATableOrADeclaredIndex(t *testing.T) {
	check := func(fn string, u Uses) {
		for _, c := range u.Calls {
			indexes := append(slices.Clone(c.Table.LocalIndexes), c.Table.GlobalIndexes...)
			switch {
			case c.Actions == 0:
				t.Errorf("%s calls nothing on %s", fn, c.Resource())
			case c.Index == "":
			case !slices.ContainsFunc(indexes, func(i schema.Index) bool { return i.Name == c.Index }):
				t.Errorf("%s reads index %s, which %s does not declare", fn, c.Index, c.Table.Name)
			case c.Actions&^(Query|Scan) != 0:
				t.Errorf("%s calls %v on index %s; an index takes Query and Scan only", fn, c.Actions, c.Resource())
			}
		}
	}
	for _, r := range All() {
		check(r.Function, r.Uses)
	}
	for _, p := range Processors() {
		check(p.Function, p.Uses)
	}
	for _, c := range Consumers() {
		check(c.Function, c.Uses)
	}
}

func TestActionsSpellTheirIAMNames(t *testing.T) {
	a := GetItem | Query | BatchWriteItem
	if got, want := a.IAM(), []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchWriteItem"}; !slices.Equal(got, want) {
		t.Errorf("IAM() = %q, want %q", got, want)
	}
	if a.String() != "GetItem|Query|BatchWriteItem" {
		t.Errorf("String() = %q", a.String())
	}
	for _, iam := range a.IAM() {
		if a&ActionOf(iam) == 0 {
			t.Errorf("ActionOf(%q) = %v", iam, ActionOf(iam))
		}
	}
	if ActionOf("dynamodb:DescribeTable") != 0 || ActionOf("lambda:GetItem") != 0 {
		t.Error("ActionOf names an action no table grant has")
	}
	merged := MergeCalls([]Call{On(schema.Games, GetItem), OnIndex(schema.Reactions, schema.IndexReactionsByTime, Query), On(schema.Games, PutItem)})
	if len(merged) != 2 || merged[0].Actions != GetItem|PutItem || merged[1].Resource() != "Reactions/index/by_time" {
		t.Errorf("MergeCalls = %+v", merged)
	}
}

// Every service route declares the role that may call it, and the
// operator may call every one; a player route admits no role.
func TestEveryServiceRouteDeclaresItsRole(t *testing.T) {
	for _, r := range All() {
		switch {
		case r.Auth == Player && (r.Role != "" || len(r.Admitted()) != 0):
			t.Errorf("%s: a player route declares role %q", r.Key(), r.Role)
		case r.Auth == Service && !slices.Contains(Roles(), r.Role):
			t.Errorf("%s: a service route declares no role (%q): say whether the game server may call it", r.Key(), r.Role)
		case r.Auth == Service && !r.Admits(Operator):
			t.Errorf("%s: the operator may not call it", r.Key())
		}
	}
}

// The game server may call the game routes DESIGN.md lists (board
// definitions, scores, match activity, games, profiles, friends) and none
// of the operator's: the /v1/ops routes other than match activity, and
// score removal.
func TestTheGameServerCallsOnlyTheGameRoutes(t *testing.T) {
	game := []string{
		"PUT /v1/leaderboards/{leaderboard_id}",
		"POST /v1/leaderboards/{leaderboard_id}/scores",
		"POST /v1/ops/activity",
		"PUT /v1/games/{game_id}",
		"PUT /v1/players/{player_id}/profile",
		"PUT /v1/players/{player_id}/friends",
	}
	operatorOnly := []string{
		"POST /v1/ops/jobs", "GET /v1/ops/jobs/{job_id}", "GET /v1/ops/dlq", "POST /v1/ops/dlq/redrive", "GET /v1/ops/health",
		"PUT /v1/ops/players/{player_id}/ban", "DELETE /v1/ops/players/{player_id}/ban",
		"DELETE /v1/ops/users/{user_id}", "GET /v1/ops/users/{user_id}/erasure",
		"DELETE /v1/leaderboards/{leaderboard_id}/players/{player_id}",
	}
	declared := map[string]Route{}
	for _, r := range All() {
		declared[r.Key()] = r
		if r.Auth == Service && strings.HasPrefix(r.Path, "/v1/ops/") && r.Key() != "POST /v1/ops/activity" && r.Admits(GameServer) {
			t.Errorf("%s: an operations route admits the game server", r.Key())
		}
	}
	for _, key := range game {
		if r, ok := declared[key]; !ok || !r.Admits(GameServer) || !r.Admits(Operator) {
			t.Errorf("%s: admits %v, want the game server and the operator", key, r.Admitted())
		}
	}
	for _, key := range operatorOnly {
		if r, ok := declared[key]; !ok || !slices.Equal(r.Admitted(), []Role{Operator}) {
			t.Errorf("%s: admits %v, want the operator alone", key, r.Admitted())
		}
	}
}

// A function checks one allow-list (RALLY_SERVICE_ROLES), so the service
// routes it serves admit the same roles.
func TestAFunctionsServiceRoutesAdmitTheSameRoles(t *testing.T) {
	for _, fn := range Functions() {
		want := AdmittedBy(All(), fn)
		for _, r := range All() {
			if r.Function == fn && r.Auth == Service && !slices.Equal(r.Admitted(), want) {
				t.Errorf("%s admits %v, but %s's service routes together admit %v", r.Key(), r.Admitted(), fn, want)
			}
		}
	}
	if got := AdmittedBy(All(), EraseUser.Function); !slices.Equal(got, []Role{Operator}) {
		t.Errorf("erase-user admits %v: its player route admits no role, its service route the operator", got)
	}
	if got := AdmittedBy(All(), FavoriteGame.Function); len(got) != 0 {
		t.Errorf("favorite-game admits %v; it serves players alone", got)
	}
}

func TestPrincipalsOfRolesAreEachListedOnce(t *testing.T) {
	p := Principals{GameServer: {"arn:gs", "arn:both"}, Operator: {"arn:op", "arn:both"}}
	if got := p.Of([]Role{GameServer, Operator}); !slices.Equal(got, []string{"arn:gs", "arn:both", "arn:op"}) {
		t.Errorf("Of(both) = %v", got)
	}
	if got := p.Of([]Role{Operator}); !slices.Equal(got, []string{"arn:op", "arn:both"}) {
		t.Errorf("Of(operator) = %v", got)
	}
	if got := p.Of(nil); len(got) != 0 {
		t.Errorf("Of(none) = %v", got)
	}
}

// The README's API table marks each service route with who may call it,
// as the route declares: G for the game routes (the game server and the
// operator), O for the operator's alone.
func TestReadmeMarksEachServiceRouteWithItsRole(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "\n## API\n")
	table, _, _ = strings.Cut(table, "\n## ")
	marked := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		// `GET /v1/ops/dlq?processor=`, or `PUT` / `DELETE /v1/ops/...`
		var methods []string
		var path string
		for _, part := range strings.Split(strings.TrimPrefix(cells[0], "| "), " / ") {
			method, p, ok := strings.Cut(strings.Trim(part, "`"), " ")
			methods = append(methods, method)
			if ok {
				path, _, _ = strings.Cut(p, "?")
			}
		}
		for _, m := range methods {
			marked[m+" "+path] = cells[1]
		}
	}
	for _, r := range All() {
		if r.Auth != Service {
			continue
		}
		want := "O"
		if r.Admits(GameServer) {
			want = "G"
		}
		if got, ok := marked[r.Key()]; !ok {
			t.Errorf("README's API table has no row for %s", r.Key())
		} else if got != want {
			t.Errorf("README's API table marks %s %q, want %q", r.Key(), got, want)
		}
	}
}

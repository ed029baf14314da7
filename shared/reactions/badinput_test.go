package reactions_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// concrete fills a route's path parameters with value.
func concrete(r routes.Route, value string) string {
	parts := strings.Split(r.Path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") {
			parts[i] = value
		}
	}
	return strings.Join(parts, "/")
}

// validQuery is the query that makes each route's request valid.
var validQuery = map[string]string{routes.FavoriteStatus.Function: "?game_ids=g1,g2"}

type badCase struct {
	name   string
	call   apitest.Call
	status int
}

// Every route refuses bad input with the right 4xx as
// application/problem+json, and none of it writes anything.
func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	s, c := startStack(t, "")
	jwt := s.JWT()
	mint := func(req authorizer.TokenRequest) string {
		tok, _, err := jwt.Mint(req)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	otherIssuer, err := authorizer.NewJWT(jwt.Issuer(), jwt.Audience()...)
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := otherIssuer.Mint(authorizer.TokenRequest{Subject: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	valid := mint(authorizer.TokenRequest{Subject: "mallory"})
	tampered := valid[:len(valid)-4] + "AAAA"
	if tampered == valid {
		tampered = valid[:len(valid)-4] + "BBBB"
	}
	badTokens := map[string]string{
		"expired token":      mint(authorizer.TokenRequest{Subject: "mallory", TTL: -time.Minute}),
		"wrong audience":     mint(authorizer.TokenRequest{Subject: "mallory", Audience: "another-app"}),
		"wrong signing key":  forged,
		"tampered signature": tampered,
		"not a token":        "not.a.jwt",
		"subject not an id":  mint(authorizer.TokenRequest{Subject: "mallory smith"}),
	}
	wrongSecret := func(req *http.Request, body []byte) error {
		return authorizer.Sign(req, body, "rallylocal", "not-the-secret", time.Now())
	}
	unknownKey := func(req *http.Request, body []byte) error {
		return authorizer.Sign(req, body, "AKIAUNKNOWN", "rallylocalsecret", time.Now())
	}
	staleDate := func(req *http.Request, body []byte) error {
		return authorizer.Sign(req, body, "rallylocal", "rallylocalsecret", time.Now().Add(-time.Hour))
	}
	big := `{"title":"` + strings.Repeat("x", 17<<10) + `"}`

	var cases []badCase
	for _, r := range routes.All() {
		path := concrete(r, "x1") + validQuery[r.Function]
		base := apitest.Call{Method: r.Method, Path: path}
		as := func(mod func(*apitest.Call)) apitest.Call {
			call := base
			if r.Auth == routes.Service {
				call.Service = true
			} else {
				call.As = "mallory"
			}
			mod(&call)
			return call
		}
		add := func(name string, status int, mod func(*apitest.Call)) {
			cases = append(cases, badCase{name: r.Key() + ": " + name, call: as(mod), status: status})
		}
		if strings.Contains(r.Path, "{") {
			add("malformed id", 400, func(c *apitest.Call) { c.Path = concrete(r, "bad*id") + validQuery[r.Function] })
			add("id over 128 characters", 400, func(c *apitest.Call) {
				c.Path = concrete(r, strings.Repeat("a", 129)) + validQuery[r.Function]
			})
		}
		if r.Method != "GET" {
			add("bad JSON", 400, func(c *apitest.Call) { c.Body = `{"title":` })
			add("unknown field", 400, func(c *apitest.Call) { c.Body = `{"title":"T","surprise":1}` })
			add("body over 16 KiB", 413, func(c *apitest.Call) { c.Body = big })
		}
		if r.Auth == routes.Player {
			add("no token", 401, func(c *apitest.Call) { c.As = "" })
			for name, tok := range badTokens {
				status := 401
				if name == "subject not an id" {
					status = 403
				}
				add(name, status, func(c *apitest.Call) { c.As, c.Token = "", tok })
			}
			if r.Function == routes.FavoriteGame.Function || r.Function == routes.ToggleLike.Function {
				add("malformed Idempotency-Key", 400, func(c *apitest.Call) {
					c.Header = map[string]string{"Idempotency-Key": "has spaces in it"}
				})
			}
		} else {
			add("unsigned", 403, func(c *apitest.Call) { c.Service = false })
			add("player token on a service route", 403, func(c *apitest.Call) { c.Service, c.As = false, "mallory" })
			add("wrong secret", 403, func(c *apitest.Call) { c.Service, c.Sign = false, wrongSecret })
			add("unknown access key", 403, func(c *apitest.Call) { c.Service, c.Sign = false, unknownKey })
			add("stale signature date", 403, func(c *apitest.Call) { c.Service, c.Sign = false, staleDate })
		}
	}
	player := func(method, path string) apitest.Call { return apitest.Call{Method: method, Path: path, As: "mallory"} }
	with := func(call apitest.Call, body string) apitest.Call { call.Body = body; return call }
	cases = append(cases,
		badCase{"status: 101 ids", player("GET", "/v1/favorites/status?game_ids="+strings.Repeat("g,", 100)+"g"), 400},
		badCase{"status: no ids", player("GET", "/v1/favorites/status"), 400},
		badCase{"status: empty id in the list", player("GET", "/v1/favorites/status?game_ids=g1,,g2"), 400},
		badCase{"status: malformed user", player("GET", "/v1/favorites/status?game_ids=g1&user_id=a%20b"), 400},
		badCase{"list: forged cursor", player("GET", "/v1/users/x1/favorites?cursor=eyJ1c2VyX2lkIjoieDEifQ.AAAAAAAAAAAAAAAAAAAAAA"), 400},
		badCase{"list: garbage cursor", player("GET", "/v1/users/x1/favorites?cursor=!!not-a-cursor"), 400},
		badCase{"list: limit 0", player("GET", "/v1/users/x1/favorites?limit=0"), 400},
		badCase{"list: limit 101", player("GET", "/v1/users/x1/favorites?limit=101"), 400},
		badCase{"list: limit not a number", player("GET", "/v1/users/x1/favorites?limit=ten"), 400},
		badCase{"top: unknown window", player("GET", "/v1/games/top?window=1y"), 400},
		badCase{"top: limit 101", player("GET", "/v1/games/top?limit=101"), 400},
		badCase{"put game: no title", with(apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, `{"thumbnail_url":"https://x.example/a.png"}`), 400},
		badCase{"put game: title wrong type", with(apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, `{"title":7}`), 400},
		badCase{"put game: blank title", with(apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, `{"title":"  "}`), 400},
		badCase{"put game: not a URL", with(apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, `{"title":"T","thumbnail_url":"javascript:alert(1)"}`), 400},
		badCase{"put game: array body", with(apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, `[]`), 400},
		badCase{"put game: empty body", apitest.Call{Method: "PUT", Path: "/v1/games/g1", Service: true}, 400},
		badCase{"unknown route", player("GET", "/v1/nothing-here"), 404},
	)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.Try(tc.call)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r.Body)
			}
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Fatalf("content type %q, want application/problem+json", ct)
			}
			p := r.Map(t)
			if p["status"] != float64(tc.status) || p["title"] == "" || p["detail"] == "" {
				t.Fatalf("problem document %s", r.Body)
			}
		})
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, table := range schema.Tables() {
		out, err := s.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(s.Tables().Of(table))})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) != 0 {
			t.Errorf("table %s holds %d items after only bad requests: %v", table.Name, len(out.Items), out.Items[0])
		}
	}
}

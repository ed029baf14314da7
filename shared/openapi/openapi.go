// Package openapi holds Rally's OpenAPI 3.1 document: the contract the local
// stack serves at /openapi.json and every integration test validates its
// responses against.
package openapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/rallyhq/rally/shared/routes"
)

//go:embed openapi.yaml
var source []byte

var (
	loadOnce sync.Once
	doc      *openapi3.T
	docJSON  []byte
	loadErr  error
)

func load() (*openapi3.T, []byte, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, loadErr = loader.LoadFromData(source)
		if loadErr != nil {
			loadErr = fmt.Errorf("openapi: load document: %w", loadErr)
			return
		}
		budgets(doc)
		roles(doc)
		if loadErr = doc.Validate(context.Background()); loadErr != nil {
			loadErr = fmt.Errorf("openapi: invalid document: %w", loadErr)
			return
		}
		docJSON, loadErr = json.Marshal(doc)
	})
	return doc, docJSON, loadErr
}

// budgets declares every route's 429 from its budgets (routes.Budget), so
// the document says what the functions enforce.
func budgets(d *openapi3.T) {
	for _, r := range routes.All() {
		item := d.Paths.Find(r.Path)
		if item == nil {
			continue
		}
		if op := item.GetOperation(r.Method); op != nil {
			op.Responses.Set("429", &openapi3.ResponseRef{Value: rateLimited(r, d.Components.Schemas["Problem"])})
		}
	}
}

func rateLimited(r routes.Route, problem *openapi3.SchemaRef) *openapi3.Response {
	var spent []string
	for _, b := range r.Budgets() {
		per := map[routes.Auth]string{routes.Player: "player", routes.Service: "calling role"}[r.Auth]
		if b == routes.IPBudget {
			per = "source IP"
		}
		line := fmt.Sprintf("%q: %d a minute per %s", b.Name, b.PerMinute, per)
		if per == "player" {
			line += fmt.Sprintf(" (%d for an account younger than a day)", max(1, b.PerMinute/2))
		}
		spent = append(spent, line)
	}
	desc := "Over budget (" + strings.Join(spent, "; ") + "); retry after Retry-After seconds."
	integer := func(what string) *openapi3.HeaderRef {
		return &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
			Description: what, Schema: openapi3.NewIntegerSchema().NewRef(),
		}}}
	}
	return &openapi3.Response{
		Description: &desc,
		Headers: openapi3.Headers{
			"Retry-After":         integer("seconds until the next request is allowed"),
			"RateLimit-Limit":     integer("the budget a minute"),
			"RateLimit-Remaining": integer("requests left now"),
			"RateLimit-Reset":     integer("seconds until the budget is whole again"),
		},
		Content: openapi3.Content{"application/problem+json": &openapi3.MediaType{Schema: problem}},
	}
}

// roles says on every service operation which roles may call it, from
// its declaration (routes.Route.Role): the x-rally-roles extension, a line
// of its description, and its 403.
func roles(d *openapi3.T) {
	for _, r := range routes.All() {
		item := d.Paths.Find(r.Path)
		if item == nil || r.Auth != routes.Service {
			continue
		}
		op := item.GetOperation(r.Method)
		if op == nil {
			continue
		}
		var names []string
		for _, role := range r.Admitted() {
			names = append(names, string(role))
		}
		if op.Extensions == nil {
			op.Extensions = map[string]any{}
		}
		op.Extensions["x-rally-roles"] = names
		op.Description = strings.TrimSpace(op.Description + "\n\n" + RolesLine(r))
		forbidden := "The signature is not of a role this route admits (" + strings.Join(names, ", ") +
			"), or no valid SigV4 signature was sent."
		op.Responses.Set("403", &openapi3.ResponseRef{Value: &openapi3.Response{
			Description: &forbidden,
			Content:     openapi3.Content{"application/problem+json": &openapi3.MediaType{Schema: d.Components.Schemas["Problem"]}},
		}})
	}
}

// RolesLine is the sentence a service operation's description ends with,
// naming who may call it.
func RolesLine(r routes.Route) string {
	if r.Admits(routes.GameServer) {
		return "Callers: the game-server role or the operator role (locally `rallyserver` or `rallylocal`)."
	}
	return "Callers: the operator role alone (locally `rallylocal`); a game server's signature answers 403."
}

// Document returns the parsed document.
func Document() (*openapi3.T, error) {
	d, _, err := load()
	return d, err
}

// JSON returns the document as JSON.
func JSON() []byte {
	_, b, err := load()
	if err != nil {
		panic(err)
	}
	return b
}

// ValidateResponse checks a response against the operation for method and
// the route's path template (e.g. "/v1/favorites/{game_id}"): the status is
// declared, the content type matches, and the body satisfies the schema.
func ValidateResponse(method, pathTemplate string, status int, contentType string, body []byte) error {
	d, _, err := load()
	if err != nil {
		return err
	}
	item := d.Paths.Find(pathTemplate)
	if item == nil {
		return fmt.Errorf("openapi: no path %s", pathTemplate)
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op == nil {
		return fmt.Errorf("openapi: no operation %s %s", method, pathTemplate)
	}
	ref := op.Responses.Status(status)
	if ref == nil {
		ref = op.Responses.Default()
	}
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("openapi: %s %s does not declare status %d", method, pathTemplate, status)
	}
	mediaType := strings.TrimSpace(strings.Split(contentType, ";")[0])
	if len(ref.Value.Content) == 0 {
		return nil
	}
	mt := ref.Value.Content.Get(mediaType)
	if mt == nil {
		return fmt.Errorf("openapi: %s %s %d: undeclared content type %q", method, pathTemplate, status, contentType)
	}
	if mt.Schema == nil || mt.Schema.Value == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("openapi: %s %s %d: body is not JSON: %w", method, pathTemplate, status, err)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("openapi: %s %s %d: %w", method, pathTemplate, status, err)
	}
	return nil
}

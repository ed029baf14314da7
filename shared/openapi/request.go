package openapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/rallyhq/rally/shared/api"
	"github.com/rallyhq/rally/shared/errs"
)

// ValidateRequest checks a request, as the payload format 2.0 event API
// Gateway builds for it, against the operation of method and the route's
// path template: its path, query and header parameters and its JSON body.
// It answers nil, an errs.TooLarge error for a body over api.MaxBodyBytes,
// or an errs.Invalid error whose fields name each mismatch
// the way the handlers name them (the parameter, header or body field, and
// what was expected there), so a refusal reads the same whichever layer
// made it. Authentication is not checked here: the authorizers do that.
//
// A body is read as JSON whatever its Content-Type, as the handlers read
// it.
func ValidateRequest(ctx context.Context, method, pathTemplate string, ev events.APIGatewayV2HTTPRequest) error {
	route, err := operation(method, pathTemplate)
	if err != nil {
		return err
	}
	req, err := httpRequest(ctx, ev)
	if err != nil {
		return errs.Field("body", err.Error())
	}
	// A body over the handlers' limit is too large (413) before it is
	// anything else, as the handlers answer it.
	if route.Operation.RequestBody != nil && req.ContentLength > api.MaxBodyBytes {
		return errs.New(errs.TooLarge, "the request body exceeds %d bytes", api.MaxBodyBytes)
	}
	err = openapi3filter.ValidateRequest(ctx, &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: ev.PathParameters,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
			SkipSettingDefaults: true,
		},
	})
	if err == nil {
		return nil
	}
	var found errs.Fields
	collect(&found, route.Operation, err)
	// A rule broken once can be reported by several schema errors (each
	// unknown property of an object, say); the caller hears of it once.
	var fields errs.Fields
	for _, fe := range found {
		if !slices.Contains(fields, fe) {
			fields = append(fields, fe)
		}
	}
	if len(fields) == 0 {
		// Nothing the mapping knows; still a refusal. The validator's own
		// words quote the value, which may be a user id: they stay in Err.
		fields.Add("body", "does not match the operation's schema in the OpenAPI document")
	}
	e := fields.Err().(*errs.Error)
	e.Err = err
	return e
}

var (
	routesMu sync.Mutex
	routeMap = map[string]*routers.Route{}
)

// operation is the document's route for method and path template: the
// local gateway has matched the request to a declared route already, as
// API Gateway does, so no second router guesses it again.
func operation(method, pathTemplate string) (*routers.Route, error) {
	d, _, err := load()
	if err != nil {
		return nil, err
	}
	key := strings.ToUpper(method) + " " + pathTemplate
	routesMu.Lock()
	defer routesMu.Unlock()
	if r, ok := routeMap[key]; ok {
		return r, nil
	}
	item := d.Paths.Find(pathTemplate)
	if item == nil {
		return nil, fmt.Errorf("openapi: no path %s", pathTemplate)
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op == nil {
		return nil, fmt.Errorf("openapi: no operation %s", key)
	}
	r := &routers.Route{Spec: d, Path: pathTemplate, PathItem: item, Method: strings.ToUpper(method), Operation: op}
	routeMap[key] = r
	return r, nil
}

// httpRequest rebuilds the HTTP request an event stands for.
func httpRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method, _, _ = strings.Cut(ev.RouteKey, " ")
	}
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, errors.New("is not valid base64")
		}
		body = b
	}
	u := &url.URL{Path: path, RawQuery: ev.RawQueryString}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	for name, value := range ev.Headers {
		req.Header.Set(name, value)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body = http.NoBody
	}
	return req, nil
}

// collect turns the validator's errors into field errors.
func collect(f *errs.Fields, op *openapi3.Operation, err error) {
	if multi, ok := err.(openapi3.MultiError); ok {
		for _, e := range multi {
			collect(f, op, e)
		}
		return
	}
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		return
	}
	switch {
	case re.Parameter != nil:
		p := re.Parameter
		if errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
			f.Add(p.Name, "is required")
			return
		}
		if errors.Is(re.Err, openapi3filter.ErrInvalidEmptyValue) {
			f.Add(p.Name, "must not be empty")
			return
		}
		var schema *openapi3.Schema
		if p.Schema != nil {
			schema = p.Schema.Value
		}
		f.Add(p.Name, expected(schema))
	case re.RequestBody != nil:
		if errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
			f.Add("body", "a JSON object is required")
			return
		}
		found := schemaErrors(re.Err)
		if len(found) == 0 {
			f.Add("body", "is not valid JSON")
			return
		}
		root := bodySchema(op)
		for _, leaf := range found {
			bodyField(f, root, leaf)
		}
	}
}

func bodySchema(op *openapi3.Operation) *openapi3.Schema {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	mt := op.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return nil
	}
	return mt.Schema.Value
}

// schemaErrors are the innermost schema errors in err: the values that
// broke a rule, rather than the objects holding them. The JSON Schema
// 2020-12 validator nests them (Origin); the legacy one lists them.
func schemaErrors(err error) []*openapi3.SchemaError {
	var multi openapi3.MultiError
	switch e := err.(type) {
	case nil:
		return nil
	case openapi3.MultiError:
		multi = e
	case *openapi3.SchemaError:
		if inner := schemaErrors(e.Origin); len(inner) > 0 {
			return inner
		}
		return []*openapi3.SchemaError{e}
	default:
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			return schemaErrors(se)
		}
		if errors.As(err, &multi) {
			break
		}
		return schemaErrors(errors.Unwrap(err))
	}
	var out []*openapi3.SchemaError
	for _, e := range multi {
		out = append(out, schemaErrors(e)...)
	}
	return out
}

// bodyField records what one broken rule says, under the field's name as
// the handlers give it ("scope.game", "friend_ids").
func bodyField(f *errs.Fields, root *openapi3.Schema, leaf *openapi3.SchemaError) {
	loc := leaf.JSONPointer()
	schema := at(root, loc)
	name, item := fieldName(loc)
	object, _ := leaf.Value.(map[string]any)
	switch leaf.SchemaField {
	case "required":
		// The legacy validator points at the missing property, the 2020-12
		// one at the object missing it.
		if n := len(loc); n > 0 {
			if _, present := object[loc[n-1]]; !present {
				if parent := at(root, loc[:n-1]); parent != nil && slices.Contains(parent.Required, loc[n-1]) {
					f.Add(name, "is required")
					return
				}
			}
		}
		if schema == nil || object == nil {
			break
		}
		for _, req := range schema.Required {
			if _, ok := object[req]; !ok {
				f.Add(join(name, req), "is required")
			}
		}
		return
	case "additionalProperties", "unevaluatedProperties", "properties", "maxProperties", "false":
		if schema == nil || object == nil {
			break
		}
		var unknown []string
		for k := range object {
			if _, ok := schema.Properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		sort.Strings(unknown)
		for _, k := range unknown {
			f.Add(join(name, k), "is not a known field")
		}
		if len(unknown) > 0 {
			return
		}
	}
	if name == "" {
		name = "body"
	}
	msg := expected(schema)
	if item != "" {
		msg = "item " + item + " " + msg
	}
	f.Add(name, msg)
}

// at is the schema of the value at loc under root.
func at(root *openapi3.Schema, loc []string) *openapi3.Schema {
	s := root
	for _, token := range loc {
		if s == nil {
			return nil
		}
		if _, err := strconv.Atoi(token); err == nil && s.Items != nil {
			s = s.Items.Value
			continue
		}
		p, ok := s.Properties[token]
		if !ok {
			return nil
		}
		s = p.Value
	}
	return s
}

// fieldName joins a body location with dots, as the handlers name nested
// fields ("scope.game"); a list's items are named by their list, and the
// index of the last one is returned apart.
func fieldName(loc []string) (name, item string) {
	var parts []string
	for i, token := range loc {
		if _, err := strconv.Atoi(token); err == nil && i > 0 {
			if i == len(loc)-1 {
				item = token
			}
			continue
		}
		parts = append(parts, token)
	}
	return strings.Join(parts, "."), item
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// expected says what a schema admits, in the words the handlers use.
func expected(s *openapi3.Schema) string {
	if s == nil {
		return "is not valid here"
	}
	if len(s.Enum) > 0 {
		values := make([]string, 0, len(s.Enum))
		for _, v := range s.Enum {
			values = append(values, fmt.Sprint(v))
		}
		return "must be one of " + strings.Join(values, ", ")
	}
	switch {
	case s.Type.Includes("integer"):
		switch {
		case s.Min != nil && s.Max != nil:
			return fmt.Sprintf("must be an integer from %s to %s", num(*s.Min), num(*s.Max))
		case s.Min != nil:
			return fmt.Sprintf("must be an integer of at least %s", num(*s.Min))
		case s.Max != nil:
			return fmt.Sprintf("must be an integer of at most %s", num(*s.Max))
		}
		return "must be an integer"
	case s.Type.Includes("number"):
		return "must be a number"
	case s.Type.Includes("boolean"):
		return "must be a boolean"
	case s.Type.Includes("array"):
		msg := "must be a list"
		if s.MaxItems != nil {
			msg += fmt.Sprintf(" of at most %d", *s.MaxItems)
		}
		if s.Items != nil && s.Items.Value != nil && s.Items.Value.Pattern == idPattern {
			msg += " ids, each 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
		}
		return msg
	case s.Type.Includes("object"):
		return "must be an object"
	case s.Type.Includes("string"):
		switch {
		case s.Pattern == idPattern:
			return api.IDMessage
		case s.Format == "uri":
			return "must be an absolute http(s) URL of at most 2048 characters"
		case s.Format == "date-time":
			return "must be an RFC 3339 time such as 2026-11-22T10:00:00Z"
		case s.Format == "date":
			return "must be a date such as 2026-11-22"
		case s.MaxLength != nil:
			return fmt.Sprintf("must be %d-%d characters", s.MinLength, *s.MaxLength)
		case s.MinLength > 0:
			return fmt.Sprintf("must be at least %d characters", s.MinLength)
		}
		return "must be a string"
	}
	return "is not valid here"
}

// idPattern is the document's pattern of a Rally id (components.schemas.ID).
const idPattern = "^[A-Za-z0-9._:-]{1,128}$"

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

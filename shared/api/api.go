// Package api is Rally's HTTP edge: it turns API Gateway v2 events into
// validated requests for feature handlers and their results (or errors) into
// JSON and application/problem+json responses. Every route uses it, so bad
// input is answered the same way everywhere.
package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/aws/aws-lambda-go/events"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/obs"
)

// Handler is the Lambda signature of every HTTP function.
type Handler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Endpoint is a feature's request handler.
type Endpoint func(context.Context, *Request) (Response, error)

// Response is what an endpoint answers; Body is encoded as JSON.
type Response struct {
	Status  int
	Body    any
	Headers map[string]string
}

// OK answers 200 with body.
func OK(body any) Response { return Response{Status: http.StatusOK, Body: body} }

// Accepted answers 202 with body.
func Accepted(body any) Response { return Response{Status: http.StatusAccepted, Body: body} }

// MaxBodyBytes is the largest request body any route accepts.
const MaxBodyBytes = 16 << 10

// MetricServerErrors counts the requests a function answered with a 5xx.
// Serve answers them itself, so Lambda counts no error for them: this
// metric is what sees a route failing (its alarm is in the CDK stack).
const MetricServerErrors = "ServerErrors"

// MetricDegradedReads counts the reads a function answered with
// "degraded": true: served from DynamoDB because Redis was unreachable or
// not trusted. Counted here, from the answer itself, every read route that
// keeps the API's promise is counted without a line of its own.
const MetricDegradedReads = "DegradedReads"

// Serve adapts an endpoint to the Lambda handler signature: it builds the
// Request (service callers are checked against services), maps errors to
// problems, logs failures with the request id, and counts the 5xx answers
// and the degraded reads in metrics (nil counts nothing).
func Serve(log *slog.Logger, metrics *obs.Metrics, services ServiceRoles, e Endpoint) Handler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		req := &Request{Event: ev, ServiceRoles: services}
		ctx = obs.WithUsers(ctx, req.users()...)
		resp, err := e(ctx, req)
		if err != nil {
			resp = ProblemFor(err)
			level := slog.LevelInfo
			if resp.Status >= 500 {
				level = slog.LevelError
			}
			log.Log(ctx, level, "request failed",
				"route", ev.RouteKey, "status", resp.Status, "request_id", ev.RequestContext.RequestID, "error", err.Error())
		}
		if resp.Status >= 500 {
			metrics.Count(MetricServerErrors, 1, nil)
		}
		out := Encode(resp)
		if degraded(out) {
			metrics.Count(MetricDegradedReads, 1, nil)
		}
		return out, nil
	}
}

// userFields are the path, query and body fields whose values are user
// ids; friend_ids is a list of them.
var userFields = []string{"user_id", "player_id"}

// users are the user ids a request names: the calling player, and any
// user id in its path, query or body. Logs made while serving it write
// them as hashes (obs.WithUsers).
func (r *Request) users() []string {
	var ids []string
	if auth := r.Event.RequestContext.Authorizer; auth != nil && auth.JWT != nil {
		ids = append(ids, auth.JWT.Claims["sub"])
	}
	for _, f := range userFields {
		ids = append(ids, r.Event.PathParameters[f], r.Event.QueryStringParameters[f])
	}
	body, err := r.Body()
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return ids
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ids
	}
	for _, f := range userFields {
		var id string
		if json.Unmarshal(fields[f], &id) == nil {
			ids = append(ids, id)
		}
	}
	var friends []string
	if json.Unmarshal(fields["friend_ids"], &friends) == nil {
		ids = append(ids, friends...)
	}
	return ids
}

// degraded reports whether a successful answer says it was served without
// Redis. The field is omitted unless true, so most bodies are not parsed.
func degraded(out events.APIGatewayV2HTTPResponse) bool {
	if out.StatusCode != http.StatusOK || !strings.Contains(out.Body, `"degraded"`) {
		return false
	}
	var body struct {
		Degraded bool `json:"degraded"`
	}
	return json.Unmarshal([]byte(out.Body), &body) == nil && body.Degraded
}

// Encode renders a Response as an API Gateway v2 response.
func Encode(r Response) events.APIGatewayV2HTTPResponse {
	headers := map[string]string{"Content-Type": "application/json"}
	for k, v := range r.Headers {
		headers[k] = v
	}
	body := ""
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return Encode(ProblemFor(err))
		}
		body = string(b)
	}
	status := r.Status
	if status == 0 {
		status = http.StatusOK
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: headers, Body: body}
}

// Request is one API call with Rally's accessors over the Lambda event.
type Request struct {
	Event events.APIGatewayV2HTTPRequest
	// ServiceRoles are the IAM principals allowed to call service routes;
	// an IAM caller not on it is refused (403).
	ServiceRoles ServiceRoles
}

// Path returns a path parameter.
func (r *Request) Path(name string) string { return r.Event.PathParameters[name] }

// Query returns a query-string parameter.
func (r *Request) Query(name string) string { return r.Event.QueryStringParameters[name] }

// Header returns a header value; API Gateway v2 lower-cases header names.
func (r *Request) Header(name string) string {
	if v, ok := r.Event.Headers[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range r.Event.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// Body returns the raw request body, decoding base64 when API Gateway did so.
// Bodies over MaxBodyBytes are rejected.
func (r *Request) Body() ([]byte, error) {
	body := []byte(r.Event.Body)
	if r.Event.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(r.Event.Body)
		if err != nil {
			return nil, errs.Field("body", "is not valid base64")
		}
		body = b
	}
	if len(body) > MaxBodyBytes {
		return nil, errs.New(errs.TooLarge, "the request body exceeds %d bytes", MaxBodyBytes)
	}
	return body, nil
}

// Decode parses the JSON body into v strictly: one JSON object, no unknown
// fields, at most MaxBodyBytes. An empty body is an error unless optional.
func (r *Request) Decode(v any) error {
	body, err := r.Body()
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return errs.Field("body", "a JSON object is required")
	}
	return DecodeJSON(body, v)
}

// DecodeJSON parses exactly one JSON value into v, rejecting unknown fields,
// repeated keys and wrong types with field-level messages.
func DecodeJSON(body []byte, v any) error {
	if name, repeated := repeatedKey(body); repeated {
		// The decoder would keep the last value, another reader the first:
		// which one the caller meant is not for Rally to guess.
		return errs.Field(name, "is given more than once")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errs.Field("body", "must hold exactly one JSON object")
	}
	return nil
}

// repeatedKey names the first key an object of body's first JSON value
// holds twice, as a dotted path (scope.game); repeated is false when none
// does or the value is not valid JSON (the decoder says so). Keys are
// compared as the decoder matches them to fields, without regard to case:
// "title" and "Title" set the same field.
func repeatedKey(body []byte) (name string, repeated bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		keys    map[string]bool // the folded keys so far; nil in an array
		path    string          // where the object or array is
		key     string          // the key whose value comes next
		wantKey bool
	}
	var levels []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *level
		if n := len(levels); n > 0 {
			top = levels[n-1]
		}
		if key, ok := tok.(string); ok && top != nil && top.wantKey {
			folded := foldKey(key)
			if top.keys[folded] {
				return joinPath(top.path, key), true
			}
			top.keys[folded] = true
			top.key, top.wantKey = key, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			l := &level{}
			if top != nil {
				l.path = top.path
				if top.keys != nil {
					l.path = joinPath(top.path, top.key)
				}
			}
			if tok == json.Delim('{') {
				l.keys, l.wantKey = map[string]bool{}, true
			}
			levels = append(levels, l)
			continue
		case json.Delim('}'), json.Delim(']'):
			levels = levels[:len(levels)-1]
		}
		// A value is complete: the enclosing object's next token is a key.
		if len(levels) == 0 {
			return "", false
		}
		if top := levels[len(levels)-1]; top.keys != nil {
			top.wantKey = true
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// foldKey maps key to one spelling of every key equal to it under Unicode
// case folding (bytes.EqualFold), as encoding/json matches field names.
func foldKey(key string) string {
	var b strings.Builder
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return errs.Field(field, "must be a "+jsonTypeName(typeErr.Type.Kind().String()))
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errs.Field("body", "is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return errs.Field(name, "is not a known field")
	}
	return errs.Field("body", "is not valid JSON")
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "list"
	case "struct", "map":
		return "object"
	}
	return kind
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidID reports whether s is a Rally id: 1–128 of [A-Za-z0-9._:-].
func ValidID(s string) bool { return idPattern.MatchString(s) }

// IDMessage is what a field error says of a value that is not a valid id.
const IDMessage = "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"

// CheckID records a field error unless value is a valid id.
func CheckID(f *errs.Fields, field, value string) {
	if !ValidID(value) {
		f.Add(field, IDMessage)
	}
}

// CheckURL records a field error unless value is empty or an absolute
// http(s) URL of at most 2048 characters (an avatar, a thumbnail).
func CheckURL(f *errs.Fields, field, value string) {
	if value == "" {
		return
	}
	if u, err := url.Parse(value); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(value) > 2048 {
		f.Add(field, "must be an absolute http(s) URL of at most 2048 characters")
	}
}

// IntQuery parses an optional integer query parameter within [min, max].
func (r *Request) IntQuery(f *errs.Fields, name string, def, min, max int) int {
	raw, present := r.Event.QueryStringParameters[name]
	if !present {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < min || n > max {
		f.Add(name, "must be an integer from "+strconv.Itoa(min)+" to "+strconv.Itoa(max))
		return def
	}
	return n
}

// OneOf parses an optional enumerated query parameter.
func (r *Request) OneOf(f *errs.Fields, name, def string, allowed ...string) string {
	raw, present := r.Event.QueryStringParameters[name]
	if !present {
		return def
	}
	for _, a := range allowed {
		if raw == a {
			return raw
		}
	}
	f.Add(name, "must be one of "+strings.Join(allowed, ", "))
	return def
}

// Package awsapi is the local stack's AWS endpoint: the one URL a function
// binary's AWS_ENDPOINT_URL points at. It verifies each call's SigV4
// signature, knows from the access key which function made it, checks the
// call against that function's role statements (infra/local/policy) as IAM
// would, and serves it: DynamoDB and DynamoDB Streams by forwarding to
// DynamoDB Local, Secrets Manager from the secrets it is given, Firehose
// into the local analytics sink, Lambda Invoke into the local functions.
// Any other call is refused by name, so a new dependency fails here first.
package awsapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/rallyhq/rally/infra/local/authorizer"
	"github.com/rallyhq/rally/infra/local/policy"
)

// Region and AccountID of every ARN the endpoint checks.
const (
	Region    = authorizer.Region
	AccountID = authorizer.AccountID
)

// ErrNotFound is what Options.Invoke and Options.Firehose wrap for a
// function or delivery stream that does not exist; the caller gets
// ResourceNotFoundException.
var ErrNotFound = errors.New("awsapi: not found")

// Secret is one Secrets Manager secret: its AWSCURRENT value and, once
// rotated, its AWSPREVIOUS one ("" when never rotated).
type Secret struct {
	Current, Previous string
}

// Firehose receives what functions put to delivery streams.
type Firehose interface {
	// PutRecords delivers records (each a record's data) to stream;
	// failed[i] means record i was refused and should be sent again. An
	// error wrapping ErrNotFound means there is no such stream; any other
	// fails the whole call.
	PutRecords(ctx context.Context, stream string, records [][]byte) (failed []bool, err error)
}

// InvokeFunc runs function with payload and returns its response. An error
// wrapping ErrNotFound means there is no such function; any other error is
// the function's (Lambda's Unhandled function error).
type InvokeFunc func(ctx context.Context, function string, payload []byte) ([]byte, error)

// Options configures New.
type Options struct {
	// Addr to listen on (default 127.0.0.1:0, a free port).
	Addr string
	// DynamoDB is DynamoDB Local's endpoint; DynamoDB and DynamoDB Streams
	// calls are forwarded there, signed with DynamoDBCredentials (default
	// local/local, what the local stack's own clients use).
	DynamoDB            string
	DynamoDBCredentials aws.Credentials
	// Admin, when its AccessKeyID is set, are credentials whose calls skip
	// the policy check (the local stack itself, tests).
	Admin aws.Credentials
	// Secrets are the Secrets Manager secrets by ARN
	// (arn:aws:secretsmanager:us-east-1:ACCOUNT:secret:NAME-XXXXXX).
	Secrets map[string]Secret
	// Firehose receives PutRecord and PutRecordBatch; nil refuses them.
	Firehose Firehose
	// Invoke serves Lambda Invoke; nil refuses it.
	Invoke InvokeFunc
	// Log receives one line per denied or refused call (default: discarded).
	Log *slog.Logger
	// Written, when set, is told the tables (physical names) of every
	// DynamoDB write DynamoDB Local accepted.
	Written func(tables ...string)
}

// Server is a running local AWS endpoint.
type Server struct {
	opts     Options
	url      string
	listener net.Listener
	http     *http.Server
	forward  *http.Client
	log      *slog.Logger

	mu        sync.Mutex
	callers   map[string]*caller // access key → caller
	policies  map[string]policy.Policy
	iterators map[string]iterator // shard iterator → the stream it reads
	pruned    time.Time           // when expired iterators were last dropped

	ctx    context.Context // ends at Close: asynchronous invocations
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// caller is who signs with one access key.
type caller struct {
	function string // "" for the admin
	key      authorizer.SigningKey
}

// New starts the endpoint; it serves until Close.
func New(opts Options) (*Server, error) {
	if opts.DynamoDB == "" {
		return nil, errors.New("awsapi: no DynamoDB endpoint to forward to")
	}
	if opts.DynamoDBCredentials.AccessKeyID == "" {
		opts.DynamoDBCredentials = aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("awsapi: listen on %s: %w", opts.Addr, err)
	}
	s := &Server{
		opts: opts, url: "http://" + l.Addr().String(), listener: l,
		forward: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}},
		log:     opts.Log,
		callers: map[string]*caller{}, policies: map[string]policy.Policy{}, iterators: map[string]iterator{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.Admin.AccessKeyID != "" {
		s.callers[opts.Admin.AccessKeyID] = &caller{key: authorizer.SigningKey{Secret: opts.Admin.SecretAccessKey, Token: opts.Admin.SessionToken}}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Go(func() { _ = s.http.Serve(l) })
	return s, nil
}

// URL is the endpoint's base URL (AWS_ENDPOINT_URL for the functions).
func (s *Server) URL() string { return s.url }

// Close stops serving and waits for asynchronous invocations to end.
func (s *Server) Close() error {
	// net/http counts a connection an SDK client dialled ahead but never
	// sent a request on as busy for its first 5 s: the deadline leaves room
	// past that, so only a call still being served fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.http.Shutdown(ctx)
	s.cancel()
	s.wg.Wait()
	return err
}

// AddCaller registers function with the statements of its role and returns
// fresh credentials for it, as Lambda gives a function its role session's
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). Calls
// signed with them are checked against statements; registering a function
// again replaces its statements for every credential it was given.
func (s *Server) AddCaller(function string, statements []policy.Statement) aws.Credentials {
	creds := aws.Credentials{
		AccessKeyID:     "ASIA" + strings.ToUpper(randomHex(8)),
		SecretAccessKey: randomHex(20),
		SessionToken:    randomHex(48),
		Source:          "rally-local:" + function,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies[function] = append(policy.Policy(nil), statements...)
	s.callers[creds.AccessKeyID] = &caller{function: function, key: authorizer.SigningKey{
		Secret: creds.SecretAccessKey, Token: creds.SessionToken,
	}}
	return creds
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// principal is how AWS names a function's role session in a denial.
func principal(function string) string {
	return "arn:aws:sts::" + AccountID + ":assumed-role/" + function + "/" + function
}

// maxBody bounds a request body: DynamoDB's 16 MB request limit.
const maxBody = 16 << 20

// ServeHTTP authenticates the call and hands it to its service.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSONError(w, r, http.StatusRequestEntityTooLarge, "SerializationException", "cannot read the request body: "+err.Error())
		return
	}
	op := operationOf(r)
	c, sig, ok := s.authenticate(w, r, body, op)
	if !ok {
		return
	}
	call := &call{Server: s, w: w, r: r, body: body, op: op, caller: c}
	switch op.service {
	case "dynamodb":
		call.dynamoDB()
	case "secretsmanager":
		call.secretsManager()
	case "firehose":
		call.firehose()
	case "lambda":
		call.lambda()
	default:
		s.log.Warn("AWS call not served locally", "function", c.function, "service", sig.Service, "operation", op.name)
		call.fail(http.StatusBadRequest, "UnknownOperationException",
			fmt.Sprintf("%s (service %s) is not served by the local AWS endpoint (it serves DynamoDB, DynamoDB Streams, Secrets Manager GetSecretValue and DescribeSecret, Firehose PutRecord and PutRecordBatch, Lambda Invoke)", op.name, sig.Service))
	}
}

// operation is what a request calls: the service (its signing name, ""
// for one this endpoint does not serve) and the operation, named as IAM
// names its action where the endpoint serves it.
type operation struct {
	service string
	name    string // "dynamodb:PutItem"; an unserved call's X-Amz-Target or method and path
	op      string // the bare operation: PutItem
	rest    bool   // a REST-JSON call (Lambda)
	target  string // the function a Lambda call names
}

func operationOf(r *http.Request) operation {
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		prefix, op, _ := strings.Cut(target, ".")
		switch prefix {
		case "DynamoDB_20120810", "DynamoDBStreams_20120810":
			// Both sign as dynamodb, and IAM names both's actions so.
			return operation{service: "dynamodb", name: "dynamodb:" + op, op: op}
		case "secretsmanager":
			return operation{service: "secretsmanager", name: "secretsmanager:" + op, op: op}
		case "Firehose_20150804":
			return operation{service: "firehose", name: "firehose:" + op, op: op}
		}
		return operation{name: target}
	}
	if fn, ok := lambdaInvokePath(r); ok && r.Method == http.MethodPost {
		return operation{service: "lambda", name: "lambda:Invoke", op: "Invoke", rest: true, target: fn}
	}
	return operation{name: r.Method + " " + r.URL.Path, rest: true}
}

// authenticate verifies the signature and finds its caller; on failure it
// answers as the service would.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, body []byte, op operation) (*caller, authorizer.Signature, bool) {
	var who *caller
	v := authorizer.Verifier{
		Key: func(accessKey string) (authorizer.SigningKey, bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			who = s.callers[accessKey]
			if who == nil {
				return authorizer.SigningKey{}, false
			}
			return who.key, true
		},
		Scope: func(region, service string) error {
			if region != Region {
				return fmt.Errorf("credential should be scoped to a valid region, not %q (the local stack is %s)", region, Region)
			}
			if op.service != "" && service != op.service {
				return fmt.Errorf("credential should be scoped to correct service: %q, not %q", op.service, service)
			}
			return nil
		},
	}
	sig, err := v.Verify(r, body)
	if err != nil {
		var refused *authorizer.SignatureError
		errors.As(err, &refused)
		status := http.StatusBadRequest
		if op.rest {
			status = http.StatusForbidden
		}
		s.log.Warn("AWS call refused: bad signature", "operation", op.name, "code", refused.Code, "reason", refused.Reason)
		writeError(w, r, op.rest, status, refused.Code, refused.Reason)
		return nil, sig, false
	}
	return who, sig, true
}

// call is one authenticated request.
type call struct {
	*Server
	w      http.ResponseWriter
	r      *http.Request
	body   []byte
	op     operation
	caller *caller
}

// allowed checks every (action, resource) the call needs against the
// caller's policy and answers AccessDeniedException for the first one it
// does not allow.
func (c *call) allowed(needs ...need) bool {
	if c.caller.function == "" {
		return true
	}
	c.mu.Lock()
	p := c.policies[c.caller.function]
	c.mu.Unlock()
	for _, n := range needs {
		d := p.Decide(n.action, n.resource, n.keys)
		if d == policy.Allow {
			continue
		}
		why := "because no identity-based policy allows the " + n.action + " action"
		if d == policy.ExplicitDeny {
			why = "with an explicit deny in an identity-based policy"
		}
		c.log.Warn("AWS call denied", "function", c.caller.function, "action", n.action, "resource", n.resource, "decision", d.String())
		status := http.StatusBadRequest
		if c.op.rest {
			status = http.StatusForbidden
		}
		c.fail(status, "AccessDeniedException", fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s %s",
			principal(c.caller.function), n.action, n.resource, why))
		return false
	}
	return true
}

// need is one IAM action a call needs on one resource, with the
// condition keys IAM evaluates it with (nil for none).
type need struct {
	action, resource string
	keys             policy.Keys
}

func (c *call) fail(status int, code, message string) {
	writeError(c.w, c.r, c.op.rest, status, code, message)
}

func writeError(w http.ResponseWriter, r *http.Request, rest bool, status int, code, message string) {
	if rest {
		w.Header().Set("X-Amzn-ErrorType", code)
		writeJSON(w, "application/json", status, map[string]string{"Type": "User", "message": message})
		return
	}
	writeJSONError(w, r, status, code, message)
}

// writeJSONError answers in the JSON protocols' error shape, which the SDK
// decodes into an APIError with code as its ErrorCode.
func writeJSONError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	writeJSON(w, contentType(r), status, map[string]string{"__type": "com.amazon.coral.service#" + code, "message": message})
}

func contentType(r *http.Request) string {
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-amz-json-") {
		return ct
	}
	return "application/x-amz-json-1.0"
}

func writeJSON(w http.ResponseWriter, ct string, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"__type":"InternalFailure","message":"cannot encode the response"}`)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Amzn-RequestId", randomHex(16))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decode reads the call's JSON body into v, answering
// SerializationException when it cannot.
func (c *call) decode(v any) bool {
	if err := json.Unmarshal(c.body, v); err != nil {
		c.fail(http.StatusBadRequest, "SerializationException", "cannot read the "+c.op.name+" request: "+err.Error())
		return false
	}
	return true
}

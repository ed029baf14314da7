// Package template reads a synthesized Rally template (cdk.out/
// Rally-<stage>.template.json, or the JSON of an in-process synthesis) and
// gives each Lambda function as the deployment would run it, but pointed at
// the local stack: its timeout and memory, its environment with every
// intrinsic function resolved to the local stack's names (tables, Redis,
// secrets, streams, other functions) and its role's IAM statements with
// their resources resolved to local ARNs. An intrinsic it cannot resolve is
// an error naming the variable or statement: a value is never dropped.
package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rallyhq/rally/infra/local/policy"
	"github.com/rallyhq/rally/shared/routes"
	"github.com/rallyhq/rally/shared/schema"
)

// Local is what the template's resources are, in the local stack.
type Local struct {
	// Tables are the local stack's physical table names.
	Tables schema.Names
	// RedisURL is the local Redis (redis://host:port): what the cache's
	// endpoint resolves to. RedisCluster says whether it is a cluster; it
	// replaces the template's RALLY_REDIS_CLUSTER (the deployed cache's).
	RedisURL     string
	RedisCluster bool
	// Region and AccountID make the local ARNs (defaults us-east-1 and
	// 000000000000).
	Region, AccountID string
	// SecretValue is the local value of a secret, what a dynamic
	// reference to it ({{resolve:secretsmanager:...}}) resolves to and
	// what the local Secrets Manager serves (default "local-" + the
	// secret's name).
	SecretValue func(Secret) string
}

// Function is one Lambda function of the template.
type Function struct {
	// Name is the function's name as in functions/<name>; it is also its
	// local deployed name (what other functions' RALLY_FUNCTION_* say).
	Name string
	// LogicalID is its resource in the template.
	LogicalID string
	Timeout   time.Duration
	MemoryMB  int
	// Env is its environment, resolved for the local stack.
	Env map[string]string
	// Role is its role's local ARN.
	Role string
	// Statements are what its role allows (and denies), resources as
	// local ARNs.
	Statements []policy.Statement
	// Mappings are the event source mappings that invoke it.
	Mappings []Mapping
}

// Secret is a Secrets Manager secret of the template.
type Secret struct {
	LogicalID string
	// Name is its local name (the construct path), ARN its local ARN.
	Name, ARN string
	// Value is its local value (Local.SecretValue).
	Value string
}

// Template is a parsed synthesized template.
type Template struct {
	stack      string
	resources  map[string]resource
	parameters map[string]parameter
}

type resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
	Metadata   map[string]any `json:"Metadata"`
}

type parameter struct {
	Default any `json:"Default"`
}

// Read parses the template at path.
func Read(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	t, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("template: %s: %w", path, errors.Unwrap(err))
	}
	return t, nil
}

// Parse parses a template's JSON.
func Parse(raw []byte) (*Template, error) {
	var doc struct {
		Resources  map[string]resource  `json:"Resources"`
		Parameters map[string]parameter `json:"Parameters"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if len(doc.Resources) == 0 {
		return nil, fmt.Errorf("template: %w", errors.New("no Resources"))
	}
	t := &Template{resources: doc.Resources, parameters: doc.Parameters}
	for _, r := range doc.Resources {
		if p := r.path(); p != "" {
			t.stack, _, _ = strings.Cut(p, "/")
			break
		}
	}
	return t, nil
}

// Stack is the stack's name (Rally-<stage>).
func (t *Template) Stack() string { return t.stack }

func (r resource) path() string {
	p, _ := r.Metadata["aws:cdk:path"].(string)
	return p
}

// Functions returns every function shared/routes declares (routes,
// processors, consumers), in that order, resolved for local. A declared
// function the template lacks is an error, as is anything of one it
// cannot resolve.
func (t *Template) Functions(local Local) ([]Function, error) {
	local = local.withDefaults()
	r := &resolver{t: t, local: local}
	byName, err := t.declaredFunctions()
	if err != nil {
		return nil, err
	}
	var out []Function
	var errs []error
	for _, name := range routes.Functions() {
		fn, err := r.function(name, byName[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, fn)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Function returns the declared function name, resolved for local.
func (t *Template) Function(name string, local Local) (Function, error) {
	if !slices.Contains(routes.Functions(), name) {
		return Function{}, fmt.Errorf("template: %s is not a function shared/routes declares", name)
	}
	byName, err := t.declaredFunctions()
	if err != nil {
		return Function{}, err
	}
	return (&resolver{t: t, local: local.withDefaults()}).function(name, byName[name])
}

// Secrets returns the template's secrets with their local names, ARNs
// and values.
func (t *Template) Secrets(local Local) []Secret {
	local = local.withDefaults()
	r := &resolver{t: t, local: local}
	var out []Secret
	for _, id := range t.ids("AWS::SecretsManager::Secret") {
		out = append(out, r.secret(id))
	}
	return out
}

func (l Local) withDefaults() Local {
	if l.Region == "" {
		l.Region = "us-east-1"
	}
	if l.AccountID == "" {
		l.AccountID = "000000000000"
	}
	if l.SecretValue == nil {
		l.SecretValue = func(s Secret) string { return "local-" + s.Name }
	}
	if l.Tables == nil {
		l.Tables = schema.NamesFromEnv("")
	}
	return l
}

// ids lists the logical ids of a type, sorted.
func (t *Template) ids(typ string) []string {
	var out []string
	for id, r := range t.resources {
		if r.Type == typ {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// declaredFunctions maps each declared function to its resource: the
// AWS::Lambda::Function at <stack>/Functions/<CamelName>/Function.
func (t *Template) declaredFunctions() (map[string]string, error) {
	byCamel := map[string]string{}
	for _, name := range routes.Functions() {
		byCamel[routes.Camel(name)] = name
	}
	out := map[string]string{}
	for _, id := range t.ids("AWS::Lambda::Function") {
		if name, ok := byCamel[t.functionSegment(id)]; ok {
			if prev, dup := out[name]; dup {
				return nil, fmt.Errorf("template: function %s is both %s and %s", name, prev, id)
			}
			out[name] = id
		}
	}
	return out, nil
}

// functionSegment is X of <stack>/Functions/X/Function/Resource, or of the
// logical id FunctionsXFunction<hash> in a template without path metadata.
func (t *Template) functionSegment(id string) string {
	parts := strings.Split(t.resources[id].path(), "/")
	if len(parts) == 5 && parts[1] == "Functions" && parts[3] == "Function" {
		return parts[2]
	}
	if m := functionID.FindStringSubmatch(id); m != nil && t.resources[id].path() == "" {
		return m[1]
	}
	return ""
}

// Logical ids CDK gives the functions' and tables' resources.
var (
	functionID = regexp.MustCompile(`^Functions([A-Za-z0-9]+)Function[0-9A-F]{8}$`)
	tableID    = regexp.MustCompile(`^Data([A-Za-z0-9]+)[0-9A-F]{8}$`)
)

// resolver resolves intrinsic functions for the local stack.
type resolver struct {
	t     *Template
	local Local
}

func (r *resolver) function(name, id string) (Function, error) {
	if id == "" {
		return Function{}, fmt.Errorf("template: function %s (declared in shared/routes) is not in the template: no AWS::Lambda::Function at %s/Functions/%s/Function",
			name, r.t.stack, routes.Camel(name))
	}
	res := r.t.resources[id]
	fn := Function{Name: name, LogicalID: id, Env: map[string]string{}, Timeout: 3 * time.Second, MemoryMB: 128}
	if v, ok := res.Properties["Timeout"]; ok {
		n, err := number(v)
		if err != nil {
			return fn, fmt.Errorf("template: %s: Timeout: %w", name, err)
		}
		fn.Timeout = time.Duration(n) * time.Second
	}
	if v, ok := res.Properties["MemorySize"]; ok {
		n, err := number(v)
		if err != nil {
			return fn, fmt.Errorf("template: %s: MemorySize: %w", name, err)
		}
		fn.MemoryMB = n
	}
	var errs []error
	env, _ := res.Properties["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	for k, v := range vars {
		s, err := r.str(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("template: %s: environment variable %s: %w", name, k, err))
			continue
		}
		fn.Env[k] = s
	}
	if _, ok := fn.Env["RALLY_REDIS_CLUSTER"]; ok {
		// The template says whether the deployed cache is a cluster; the
		// local Redis decides here.
		fn.Env["RALLY_REDIS_CLUSTER"] = strconv.FormatBool(r.local.RedisCluster)
	}
	roleID := ""
	if role, ok := res.Properties["Role"].(map[string]any); ok {
		roleID = LogicalID(role)
	}
	if roleID == "" || r.t.resources[roleID].Type != "AWS::IAM::Role" {
		errs = append(errs, fmt.Errorf("template: %s: its Role is not a role of the template", name))
	} else {
		fn.Role, _ = r.str(map[string]any{"Fn::GetAtt": []any{roleID, "Arn"}})
		st, err := r.statements(roleID)
		if err != nil {
			errs = append(errs, fmt.Errorf("template: %s: %w", name, err))
		}
		fn.Statements = st
	}
	var err error
	if fn.Mappings, err = r.mappings(id); err != nil {
		errs = append(errs, fmt.Errorf("template: %s: %w", name, err))
	}
	return fn, errors.Join(errs...)
}

// statements are the role's: the AWS::IAM::Policy resources attached to
// it, its inline Policies and the template's managed policies it uses.
func (r *resolver) statements(roleID string) ([]policy.Statement, error) {
	role := r.t.resources[roleID]
	var docs []any
	var names []string
	for _, id := range r.t.ids("AWS::IAM::Policy") {
		p := r.t.resources[id].Properties
		if attached(p["Roles"], roleID) {
			docs, names = append(docs, p["PolicyDocument"]), append(names, id)
		}
	}
	inline, _ := role.Properties["Policies"].([]any)
	for i, p := range inline {
		m, _ := p.(map[string]any)
		docs, names = append(docs, m["PolicyDocument"]), append(names, fmt.Sprintf("%s inline policy %d", roleID, i))
	}
	managed, _ := role.Properties["ManagedPolicyArns"].([]any)
	for _, arn := range managed {
		id := LogicalID(arn)
		if r.t.resources[id].Type != "AWS::IAM::ManagedPolicy" {
			return nil, fmt.Errorf("role %s uses managed policy %v, whose statements are not in the template", roleID, arn)
		}
		docs, names = append(docs, r.t.resources[id].Properties["PolicyDocument"]), append(names, id)
	}
	for _, id := range r.t.ids("AWS::IAM::ManagedPolicy") {
		p := r.t.resources[id].Properties
		if attached(p["Roles"], roleID) && !slices.Contains(names, id) {
			docs, names = append(docs, p["PolicyDocument"]), append(names, id)
		}
	}
	var out []policy.Statement
	for i, doc := range docs {
		d, _ := doc.(map[string]any)
		list, ok := d["Statement"].([]any)
		if !ok {
			list = []any{d["Statement"]}
		}
		for j, raw := range list {
			st, err := r.statement(raw)
			if err != nil {
				return nil, fmt.Errorf("policy %s, statement %d: %w", names[i], j, err)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

func (r *resolver) statement(raw any) (policy.Statement, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return policy.Statement{}, errors.New("not an object")
	}
	for _, k := range []string{"NotAction", "NotResource", "NotPrincipal"} {
		if _, ok := m[k]; ok {
			return policy.Statement{}, fmt.Errorf("%s is not supported locally", k)
		}
	}
	st := policy.Statement{}
	var err error
	if st.Effect, err = r.str(m["Effect"]); err != nil {
		return st, fmt.Errorf("Effect: %w", err)
	}
	if st.Actions, err = r.strs(m["Action"]); err != nil {
		return st, fmt.Errorf("Action: %w", err)
	}
	if st.Resources, err = r.strs(m["Resource"]); err != nil {
		return st, fmt.Errorf("Resource: %w", err)
	}
	if st.Conditions, err = r.conditions(m["Condition"]); err != nil {
		return st, fmt.Errorf("Condition: %w", err)
	}
	return st, nil
}

// conditions reads a statement's Condition block, refusing one the local
// check cannot evaluate: dropped, it would allow what AWS refuses.
func (r *resolver) conditions(raw any) ([]policy.Condition, error) {
	if raw == nil {
		return nil, nil
	}
	block, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("not an object")
	}
	var out []policy.Condition
	for _, op := range slices.Sorted(maps.Keys(block)) {
		keys, ok := block[op].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not an object", op)
		}
		for _, key := range slices.Sorted(maps.Keys(keys)) {
			values, err := r.strs(keys[key])
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", op, key, err)
			}
			c := policy.Condition{Operator: op, Key: key, Values: values}
			if err := c.Check(); err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// attached reports whether a Roles list holds {"Ref": roleID}.
func attached(roles any, roleID string) bool {
	list, _ := roles.([]any)
	for _, x := range list {
		if LogicalID(x) == roleID {
			return true
		}
	}
	return false
}

// LogicalID is the logical id of {"Ref": id} or {"Fn::GetAtt": [id, _]}.
func LogicalID(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if att, ok := m["Fn::GetAtt"].([]any); ok && len(att) == 2 {
		id, _ := att[0].(string)
		return id
	}
	return ""
}

func number(v any) (int, error) {
	switch n := v.(type) {
	case float64:
		return int(n), nil
	case string:
		return strconv.Atoi(n)
	}
	return 0, fmt.Errorf("%v is not a number", v)
}

// strs resolves a string or a list of them.
func (r *resolver) strs(v any) ([]string, error) {
	if list, ok := v.([]any); ok {
		out := make([]string, 0, len(list))
		for _, x := range list {
			s, err := r.str(x)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := r.str(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

// dynamicSecret is a dynamic reference to a secret's value.
var dynamicSecret = regexp.MustCompile(`\{\{resolve:secretsmanager:(.+?):SecretString:([^:]*):([^:]*):([^:}]*)\}\}`)

// str resolves v to a string, dynamic references included.
func (r *resolver) str(v any) (string, error) {
	x, err := r.resolve(v)
	if err != nil {
		return "", err
	}
	s, ok := x.(string)
	if !ok {
		return "", fmt.Errorf("%v is not a string", x)
	}
	if strings.Contains(s, "{{resolve:") {
		var derr error
		s = dynamicSecret.ReplaceAllStringFunc(s, func(ref string) string {
			m := dynamicSecret.FindStringSubmatch(ref)
			if m[2] != "" || m[3] != "" || m[4] != "" {
				derr = fmt.Errorf("dynamic reference %s: JSON keys and versions are not supported locally", ref)
				return ref
			}
			for _, id := range r.t.ids("AWS::SecretsManager::Secret") {
				if sec := r.secret(id); sec.ARN == m[1] || sec.Name == m[1] {
					return sec.Value
				}
			}
			derr = fmt.Errorf("dynamic reference to %s, which is no secret of the template", m[1])
			return ref
		})
		if derr != nil {
			return "", derr
		}
		if strings.Contains(s, "{{resolve:") {
			return "", fmt.Errorf("dynamic reference in %q cannot be resolved locally", s)
		}
	}
	return s, nil
}

// resolve evaluates the intrinsic functions in v.
func (r *resolver) resolve(v any) (any, error) {
	switch v := v.(type) {
	case string, bool:
		return fmt.Sprint(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			y, err := r.resolve(x)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case map[string]any:
		if len(v) != 1 {
			return nil, fmt.Errorf("%s is not a value or an intrinsic function", compact(v))
		}
		for fn, arg := range v {
			switch fn {
			case "Ref":
				id, _ := arg.(string)
				return r.ref(id)
			case "Fn::GetAtt":
				att, _ := arg.([]any)
				if len(att) != 2 {
					return nil, fmt.Errorf("Fn::GetAtt %s is not [id, attribute]", compact(arg))
				}
				id, _ := att[0].(string)
				name, _ := att[1].(string)
				return r.getAtt(id, name)
			case "Fn::Join":
				return r.join(arg)
			case "Fn::Select":
				return r.selectFn(arg)
			case "Fn::Split":
				return r.split(arg)
			case "Fn::Sub":
				return r.sub(arg)
			}
			return nil, fmt.Errorf("%s is not resolved locally (%s)", fn, compact(v))
		}
	}
	return nil, fmt.Errorf("%v cannot be resolved", v)
}

func (r *resolver) join(arg any) (any, error) {
	a, _ := arg.([]any)
	if len(a) != 2 {
		return nil, fmt.Errorf("Fn::Join %s is not [separator, list]", compact(arg))
	}
	sep, _ := a[0].(string)
	if r.mentionsCache(a[1]) {
		// rediss://<cache endpoint>:<port>: the deployed cache's URL is
		// the local Redis's (whose scheme may differ: no TLS locally).
		if r.local.RedisURL == "" {
			return nil, errors.New("the cache's URL: the local stack gave no Redis")
		}
		return r.local.RedisURL, nil
	}
	parts, err := r.resolve(a[1])
	if err != nil {
		return nil, err
	}
	list, ok := parts.([]any)
	if !ok {
		return nil, fmt.Errorf("Fn::Join of %s, not a list", compact(a[1]))
	}
	strs := make([]string, len(list))
	for i, p := range list {
		if strs[i], ok = p.(string); !ok {
			return nil, fmt.Errorf("Fn::Join of a list in a list (%s)", compact(a[1]))
		}
	}
	return strings.Join(strs, sep), nil
}

// mentionsCache reports whether v refers to the ElastiCache endpoint.
func (r *resolver) mentionsCache(v any) bool {
	switch v := v.(type) {
	case []any:
		return slices.ContainsFunc(v, r.mentionsCache)
	case map[string]any:
		if att, ok := v["Fn::GetAtt"].([]any); ok && len(att) == 2 {
			id, _ := att[0].(string)
			return isCache(r.t.resources[id].Type)
		}
		for _, x := range v {
			if r.mentionsCache(x) {
				return true
			}
		}
	}
	return false
}

func isCache(typ string) bool {
	return typ == "AWS::ElastiCache::ServerlessCache" || typ == "AWS::ElastiCache::ReplicationGroup" || typ == "AWS::ElastiCache::CacheCluster"
}

func (r *resolver) selectFn(arg any) (any, error) {
	a, _ := arg.([]any)
	if len(a) != 2 {
		return nil, fmt.Errorf("Fn::Select %s is not [index, list]", compact(arg))
	}
	idx, err := r.resolve(a[0])
	if err != nil {
		return nil, err
	}
	i, err := number(idx)
	if err != nil {
		return nil, fmt.Errorf("Fn::Select index: %w", err)
	}
	list, err := r.resolve(a[1])
	if err != nil {
		return nil, err
	}
	l, ok := list.([]any)
	if !ok || i < 0 || i >= len(l) {
		return nil, fmt.Errorf("Fn::Select %d of %s", i, compact(list))
	}
	return l[i], nil
}

func (r *resolver) split(arg any) (any, error) {
	a, _ := arg.([]any)
	if len(a) != 2 {
		return nil, fmt.Errorf("Fn::Split %s is not [separator, string]", compact(arg))
	}
	sep, _ := a[0].(string)
	s, err := r.str(a[1])
	if err != nil {
		return nil, err
	}
	var out []any
	for _, p := range strings.Split(s, sep) {
		out = append(out, p)
	}
	return out, nil
}

var subVar = regexp.MustCompile(`\$\{([^!}][^}]*)\}`)

func (r *resolver) sub(arg any) (any, error) {
	text, _ := arg.(string)
	vars := map[string]any{}
	if a, ok := arg.([]any); ok && len(a) == 2 {
		text, _ = a[0].(string)
		vars, _ = a[1].(map[string]any)
	}
	var err error
	out := subVar.ReplaceAllStringFunc(text, func(m string) string {
		name := m[2 : len(m)-1]
		var v any
		var e error
		if given, ok := vars[name]; ok {
			v, e = r.str(given)
		} else if id, att, ok := strings.Cut(name, "."); ok {
			v, e = r.getAtt(id, att)
		} else {
			v, e = r.ref(name)
		}
		if e != nil {
			err = e
			return m
		}
		s, _ := v.(string)
		return s
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (r *resolver) ref(id string) (any, error) {
	switch id {
	case "AWS::Region":
		return r.local.Region, nil
	case "AWS::AccountId":
		return r.local.AccountID, nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	case "AWS::StackName":
		return r.t.stack, nil
	}
	if p, ok := r.t.parameters[id]; ok {
		if p.Default == nil {
			return nil, fmt.Errorf("Ref to parameter %s, which has no default", id)
		}
		return r.resolve(p.Default)
	}
	res, ok := r.t.resources[id]
	if !ok {
		return nil, fmt.Errorf("Ref to %s, which is no resource or parameter of the template", id)
	}
	switch res.Type {
	case "AWS::DynamoDB::Table":
		return r.table(id)
	case "AWS::Lambda::Function":
		return r.functionName(id), nil
	case "AWS::SecretsManager::Secret":
		return r.secret(id).ARN, nil
	case "AWS::KinesisFirehose::DeliveryStream":
		return r.name(id, "DeliveryStreamName"), nil
	case "AWS::SQS::Queue":
		return "https://sqs." + r.local.Region + ".amazonaws.com/" + r.local.AccountID + "/" + r.name(id, "QueueName"), nil
	case "AWS::IAM::Role":
		return r.name(id, "RoleName"), nil
	case "AWS::Logs::LogGroup":
		return r.name(id, "LogGroupName"), nil
	case "AWS::SNS::Topic":
		return r.arn("sns", r.name(id, "TopicName")), nil
	case "AWS::S3::Bucket":
		return r.bucket(id), nil
	}
	return nil, fmt.Errorf("Ref to %s (%s) has no local value", id, res.Type)
}

func (r *resolver) getAtt(id, att string) (any, error) {
	res, ok := r.t.resources[id]
	if !ok {
		return nil, fmt.Errorf("Fn::GetAtt of %s, which is no resource of the template", id)
	}
	switch res.Type + "." + att {
	case "AWS::DynamoDB::Table.Arn":
		name, err := r.table(id)
		return r.arn("dynamodb", "table/"+name), err
	case "AWS::DynamoDB::Table.StreamArn":
		name, err := r.table(id)
		return r.arn("dynamodb", "table/"+name+"/stream/*"), err
	case "AWS::Lambda::Function.Arn":
		return r.arn("lambda", "function:"+r.functionName(id)), nil
	case "AWS::IAM::Role.Arn":
		return "arn:aws:iam::" + r.local.AccountID + ":role/" + r.name(id, "RoleName"), nil
	case "AWS::Logs::LogGroup.Arn":
		return r.arn("logs", "log-group:"+r.name(id, "LogGroupName")+":*"), nil
	case "AWS::KinesisFirehose::DeliveryStream.Arn":
		return r.arn("firehose", "deliverystream/"+r.name(id, "DeliveryStreamName")), nil
	case "AWS::SQS::Queue.Arn":
		return r.arn("sqs", r.name(id, "QueueName")), nil
	case "AWS::SQS::Queue.QueueName":
		return r.name(id, "QueueName"), nil
	case "AWS::SNS::Topic.TopicArn":
		return r.arn("sns", r.name(id, "TopicName")), nil
	case "AWS::SecretsManager::Secret.Id":
		return r.secret(id).ARN, nil
	case "AWS::S3::Bucket.Arn":
		return "arn:aws:s3:::" + r.bucket(id), nil
	}
	if isCache(res.Type) && (strings.HasSuffix(att, ".Address") || strings.HasSuffix(att, ".Port")) {
		u, err := url.Parse(r.local.RedisURL)
		if err != nil || r.local.RedisURL == "" {
			return nil, fmt.Errorf("Fn::GetAtt %s.%s: the local stack gave no Redis", id, att)
		}
		if strings.HasSuffix(att, ".Port") {
			return u.Port(), nil
		}
		return u.Hostname(), nil
	}
	return nil, fmt.Errorf("Fn::GetAtt %s.%s (%s) has no local value", id, att, res.Type)
}

func (r *resolver) arn(service, resource string) string {
	return "arn:aws:" + service + ":" + r.local.Region + ":" + r.local.AccountID + ":" + resource
}

// table is the local physical name of a table resource: the table its
// construct (<stack>/Data/<Name>) declares in shared/schema.
func (r *resolver) table(id string) (string, error) {
	parts := strings.Split(r.t.resources[id].path(), "/")
	if m := tableID.FindStringSubmatch(id); m != nil && len(parts) < 2 {
		parts = []string{m[1]}
	}
	for _, t := range schema.Tables() {
		if slices.Contains(parts, t.Name) {
			return r.local.Tables.Of(t), nil
		}
	}
	return "", fmt.Errorf("table %s (%s) is no table of shared/schema", id, r.t.resources[id].path())
}

// functionName is a function's local name: its declared name, or for a
// function shared/routes does not declare, its construct path.
func (r *resolver) functionName(id string) string {
	seg := r.t.functionSegment(id)
	for _, name := range routes.Functions() {
		if routes.Camel(name) == seg {
			return name
		}
	}
	return r.name(id, "FunctionName")
}

// bucket is a bucket's local name: its construct path, lower case, as S3
// names are (the local stack keeps no buckets: a function given one writes
// to a local directory instead, infra/local/binaries).
func (r *resolver) bucket(id string) string {
	return strings.ToLower(r.name(id, "BucketName"))
}

func (r *resolver) secret(id string) Secret {
	s := Secret{LogicalID: id, Name: r.name(id, "Name")}
	s.ARN = r.arn("secretsmanager", "secret:"+s.Name)
	s.Value = r.local.SecretValue(s)
	return s
}

// name is a resource's physical name: the property that names it when the
// template sets it, else its construct path (Rally-dev/Analytics/
// DeliveryStream) with the slashes as dashes, as CloudFormation would
// generate one from the stack and logical id.
func (r *resolver) name(id, property string) string {
	res := r.t.resources[id]
	if n, ok := res.Properties[property].(string); ok && n != "" {
		return n
	}
	p := strings.TrimSuffix(res.path(), "/Resource")
	if p == "" {
		return r.t.stack + "-" + id
	}
	return strings.ReplaceAll(p, "/", "-")
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Definitions stores leaderboard definitions in the Leaderboards table.
type Definitions struct {
	DB    ddb.DB
	Table string
	// Clock stamps created_at and updated_at when the definition carries no
	// UpdatedAt; nil means the wall clock.
	Clock clock.Clock
}

var _ leaderboards.Definitions = (*Definitions)(nil)

type definitionItem struct {
	ID        string              `dynamodbav:"leaderboard_id"`
	Title     string              `dynamodbav:"title"`
	Policy    string              `dynamodbav:"policy"`
	Order     string              `dynamodbav:"order"`
	Reset     string              `dynamodbav:"reset"`
	TieBreak  string              `dynamodbav:"tie_break"`
	Scope     *leaderboards.Scope `dynamodbav:"scope,omitempty"`
	Status    string              `dynamodbav:"status"`
	MaxN      int                 `dynamodbav:"max_n"`
	Timezone  string              `dynamodbav:"timezone"`
	Regional  string              `dynamodbav:"regional,omitempty"`
	Parts     string              `dynamodbav:"partitions,omitempty"`
	CreatedAt string              `dynamodbav:"created_at"`
	UpdatedAt string              `dynamodbav:"updated_at"`
	Ver       int64               `dynamodbav:"ver"`
}

func (it definitionItem) definition() leaderboards.Definition {
	d := leaderboards.Definition{
		ID: it.ID, Title: it.Title, Policy: leaderboards.Policy(it.Policy), Order: leaderboards.Order(it.Order),
		Reset: leaderboards.Reset(it.Reset), TieBreak: leaderboards.TieBreak(it.TieBreak),
		Status: leaderboards.Status(it.Status), MaxN: it.MaxN, Timezone: it.Timezone, Regional: it.Regional == "true",
		Partitions: partitionsOf(it.Parts),
		CreatedAt:  ddb.ParseTime(it.CreatedAt), UpdatedAt: ddb.ParseTime(it.UpdatedAt), Version: it.Ver,
	}
	if it.Scope != nil {
		d.Scope = *it.Scope
	}
	return d
}

// partitionsOf reads the stored partitions attribute: a decimal number,
// absent (0) on a board kept in one sorted set.
func partitionsOf(v string) int {
	n, _ := strconv.Atoi(v)
	return n
}

func decodeDefinition(raw map[string]types.AttributeValue) (leaderboards.Definition, error) {
	var it definitionItem
	if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
		return leaderboards.Definition{}, fmt.Errorf("decode leaderboard: %w", err)
	}
	return it.definition(), nil
}

// immutable lists the fields a board keeps for life, by their API names:
// changing any of them would reorder or re-period scores already recorded,
// or leave them out of regional views. A field whose value is absent is
// stored as no attribute.
var immutable = []struct {
	name, attr, absent string
	of                 func(leaderboards.Definition) string
}{
	{"policy", schema.AttrPolicy, "", func(d leaderboards.Definition) string { return string(d.Policy) }},
	{"order", schema.AttrOrder, "", func(d leaderboards.Definition) string { return string(d.Order) }},
	{"reset", schema.AttrReset, "", func(d leaderboards.Definition) string { return string(d.Reset) }},
	{"tie_break", schema.AttrTieBreak, "", func(d leaderboards.Definition) string { return string(d.TieBreak) }},
	{"timezone", schema.AttrTimezone, "", func(d leaderboards.Definition) string { return d.Timezone }},
	{"regional", schema.AttrRegional, "false", func(d leaderboards.Definition) string { return strconv.FormatBool(d.Regional) }},
	{"partitions", schema.AttrPartitions, "0", func(d leaderboards.Definition) string { return strconv.Itoa(d.Partitions) }},
}

// Put creates the definition, or updates its mutable fields when the
// immutable ones match what is stored. One conditional update does both, so
// two writers cannot interleave a read and a write; created_at survives and
// ver grows by one. created reports whether the board is new.
func (s *Definitions) Put(ctx context.Context, d leaderboards.Definition) (leaderboards.Definition, bool, error) {
	if d.ID == "" {
		return leaderboards.Definition{}, false, errs.Field("leaderboard_id", "is required")
	}
	at := d.UpdatedAt
	if at.IsZero() {
		at = clock.Now(s.Clock)
	}
	now := expression.Value(ddb.FormatTime(at))
	created, ver := expression.Name(schema.AttrCreatedAt), expression.Name(schema.AttrVer)
	update := expression.Set(expression.Name(schema.AttrTitle), expression.Value(d.Title)).
		Set(expression.Name(schema.AttrStatus), expression.Value(string(d.Status))).
		Set(expression.Name(schema.AttrMaxN), expression.Value(d.MaxN)).
		Set(expression.Name(schema.AttrUpdatedAt), now).
		Set(created, expression.IfNotExists(created, now)).
		Set(ver, expression.Plus(expression.IfNotExists(ver, expression.Value(0)), expression.Value(1)))
	same := make([]expression.ConditionBuilder, len(immutable))
	for i, f := range immutable {
		if v := f.of(d); v == f.absent {
			update = update.Remove(expression.Name(f.attr))
			same[i] = expression.Name(f.attr).AttributeNotExists()
		} else {
			update = update.Set(expression.Name(f.attr), expression.Value(v))
			same[i] = expression.Name(f.attr).Equal(expression.Value(v))
		}
	}
	if d.Scope == (leaderboards.Scope{}) {
		update = update.Remove(expression.Name(schema.AttrScope))
	} else {
		scope, err := attributevalue.Marshal(d.Scope)
		if err != nil {
			return leaderboards.Definition{}, false, fmt.Errorf("encode scope of %s: %w", d.ID, err)
		}
		update = update.Set(expression.Name(schema.AttrScope), expression.Value(scope))
	}
	unchanged := expression.Name(schema.AttrBoardID).AttributeNotExists().Or(expression.And(same[0], same[1], same[2:]...))
	in := ddb.UpdateInput(s.Table, map[string]types.AttributeValue{schema.AttrBoardID: ddb.S(d.ID)},
		ddb.MustBuild(expression.NewBuilder().WithUpdate(update).WithCondition(unchanged)))
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.DB.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		stored, derr := decodeDefinition(ccf.Item)
		if derr != nil {
			return leaderboards.Definition{}, false, derr
		}
		return leaderboards.Definition{}, false, immutableChanged(stored, d)
	}
	if err != nil {
		return leaderboards.Definition{}, false, unavailable(err, "put leaderboard "+d.ID)
	}
	stored, err := decodeDefinition(out.Attributes)
	if err != nil {
		return leaderboards.Definition{}, false, err
	}
	return stored, stored.Version == 1, nil
}

// immutableChanged is the Conflict for a Put that would change an
// immutable field, naming each one with its stored value.
func immutableChanged(stored, wanted leaderboards.Definition) error {
	e := &errs.Error{Kind: errs.Conflict}
	var changed []string
	for _, f := range immutable {
		if was, is := f.of(stored), f.of(wanted); was != is {
			changed = append(changed, f.name)
			e.Fields = append(e.Fields, errs.FieldError{Field: f.name,
				Message: fmt.Sprintf("cannot change once the board exists (it is %q, not %q)", was, is)})
		}
	}
	e.Detail = fmt.Sprintf("leaderboard %s: %s cannot change once the board exists", stored.ID, strings.Join(changed, ", "))
	if len(changed) == 0 {
		// The item changed between the failed write and the read that came
		// with it; the caller may simply retry.
		e.Detail = fmt.Sprintf("leaderboard %s changed concurrently; retry", wanted.ID)
	}
	return e
}

// Get returns the definition, or NotFound.
func (s *Definitions) Get(ctx context.Context, id string) (leaderboards.Definition, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.Table),
		Key:            map[string]types.AttributeValue{schema.AttrBoardID: ddb.S(id)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return leaderboards.Definition{}, unavailable(err, "get leaderboard "+id)
	}
	if len(out.Item) == 0 {
		return leaderboards.Definition{}, errs.New(errs.NotFound, "leaderboard %s not found", id)
	}
	return decodeDefinition(out.Item)
}

// List returns every definition. The table holds one small item per board,
// so a scan is the simplest complete read.
func (s *Definitions) List(ctx context.Context) ([]leaderboards.Definition, error) {
	var defs []leaderboards.Definition
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table)}
	for {
		out, err := s.DB.Scan(ctx, in)
		if err != nil {
			return nil, unavailable(err, "list leaderboards")
		}
		for _, raw := range out.Items {
			d, err := decodeDefinition(raw)
			if err != nil {
				return nil, err
			}
			defs = append(defs, d)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return defs, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// pageScan is how many items one Scan call of a listing evaluates.
const pageScan = 200

// Page returns up to limit definitions matching f, in the table's scan
// order, after the board named after. The table holds one small item per
// board, so a filtered scan that stops as soon as the page is full reads
// little; the position is a board id, where the next scan starts.
func (s *Definitions) Page(ctx context.Context, f leaderboards.Filter, after string, limit int) ([]leaderboards.Definition, string, error) {
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table), Limit: aws.Int32(pageScan)}
	var conds []expression.ConditionBuilder
	if f.Game != "" {
		conds = append(conds, expression.Name(schema.AttrScope+".game").Equal(expression.Value(f.Game)))
	}
	if f.Status != "" {
		conds = append(conds, expression.Name(schema.AttrStatus).Equal(expression.Value(string(f.Status))))
	}
	if len(conds) > 0 {
		cond := conds[0]
		if len(conds) > 1 {
			cond = expression.And(conds[0], conds[1])
		}
		e := ddb.MustBuild(expression.NewBuilder().WithFilter(cond))
		in.FilterExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Filter(), e.Names(), e.Values()
	}
	if after != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{schema.AttrBoardID: ddb.S(after)}
	}
	var defs []leaderboards.Definition
	for {
		out, err := s.DB.Scan(ctx, in)
		if err != nil {
			return nil, "", unavailable(err, "list leaderboards")
		}
		for i, raw := range out.Items {
			d, err := decodeDefinition(raw)
			if err != nil {
				return nil, "", err
			}
			defs = append(defs, d)
			if len(defs) == limit {
				more := i < len(out.Items)-1 || len(out.LastEvaluatedKey) > 0
				if !more {
					return defs, "", nil
				}
				return defs, d.ID, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return defs, "", nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

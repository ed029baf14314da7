package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	update = listKeys(update, d.Scope.Game, d.Status, d.ID)
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

// listKeys sets a board's by_game keys: its game and status#id, or no
// game (the board is not in by_game).
func listKeys(update expression.UpdateBuilder, game string, status leaderboards.Status, id string) expression.UpdateBuilder {
	update = update.Set(expression.Name(schema.AttrListKey), expression.Value(listKey(status, id)))
	if game == "" {
		return update.Remove(expression.Name(schema.AttrListGame))
	}
	return update.Set(expression.Name(schema.AttrListGame), expression.Value(game))
}

func listKey(status leaderboards.Status, id string) string { return string(status) + "#" + id }

// listed are the statuses a listing without one walks, in order.
var listed = []leaderboards.Status{leaderboards.Active, leaderboards.Frozen, leaderboards.Archived}

// Page returns up to limit definitions matching f after the position
// after, and the position of the next page ("" at the end). It queries an
// index and reads only what it returns, plus one item that says a next
// page exists: by_game for a game (status#id order), by_status otherwise
// (id order, one status after the other without a status). A position is
// the last board's "<status>#<id>".
func (s *Definitions) Page(ctx context.Context, f leaderboards.Filter, after string, limit int) ([]leaderboards.Definition, string, error) {
	statuses := listed
	if f.Status != "" {
		statuses = []leaderboards.Status{f.Status}
	}
	if f.Game != "" {
		statuses = []leaderboards.Status{f.Status}
	}
	var defs []leaderboards.Definition
	for _, st := range statuses {
		from := ""
		if after != "" {
			ast, id, _ := strings.Cut(after, "#")
			if f.Game == "" && leaderboards.Status(ast) != st {
				if slices.Index(listed, leaderboards.Status(ast)) > slices.Index(listed, st) {
					continue // a status the listing is past
				}
			} else {
				from = id
			}
		}
		page, err := s.query(ctx, f.Game, st, after, from, limit+1-len(defs))
		if err != nil {
			return nil, "", err
		}
		defs = append(defs, page...)
		if len(defs) > limit {
			last := defs[limit-1]
			return defs[:limit], listKey(last.Status, last.ID), nil
		}
	}
	return defs, "", nil
}

// query reads up to n definitions of one index partition after a board:
// by_game's for a game (status "" for every status; at is the position
// to continue after), else by_status's, after the id from.
func (s *Definitions) query(ctx context.Context, game string, status leaderboards.Status, at, from string, n int) ([]leaderboards.Definition, error) {
	var cond expression.KeyConditionBuilder
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table)}
	if game != "" {
		in.IndexName = aws.String(schema.IndexBoardsByGame)
		cond = expression.Key(schema.AttrListGame).Equal(expression.Value(game))
		if status != "" {
			cond = cond.And(expression.Key(schema.AttrListKey).BeginsWith(string(status) + "#"))
		}
		if at != "" {
			_, id, _ := strings.Cut(at, "#")
			in.ExclusiveStartKey = map[string]types.AttributeValue{
				schema.AttrListGame: ddb.S(game), schema.AttrListKey: ddb.S(at), schema.AttrBoardID: ddb.S(id),
			}
		}
	} else {
		in.IndexName = aws.String(schema.IndexBoardsByStatus)
		cond = expression.Key(schema.AttrStatus).Equal(expression.Value(string(status)))
		if from != "" {
			in.ExclusiveStartKey = map[string]types.AttributeValue{schema.AttrStatus: ddb.S(string(status)), schema.AttrBoardID: ddb.S(from)}
		}
	}
	e := ddb.MustBuild(expression.NewBuilder().WithKeyCondition(cond))
	in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.KeyCondition(), e.Names(), e.Values()
	var defs []leaderboards.Definition
	for len(defs) < n {
		in.Limit = aws.Int32(int32(n - len(defs)))
		out, err := s.DB.Query(ctx, in)
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
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return defs, nil
}

// Relist keys in by_game every board stored without its keys (defined
// before the index), each on condition that it is unchanged since read;
// it returns how many it keyed. The job runner's schedule calls it until
// it finds none.
func (s *Definitions) Relist(ctx context.Context) (int, error) {
	keyed := 0
	in := &dynamodb.ScanInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true)}
	for {
		out, err := s.DB.Scan(ctx, in)
		if err != nil {
			return keyed, unavailable(err, "relist leaderboards")
		}
		for _, raw := range out.Items {
			var it struct {
				definitionItem
				ListGame string `dynamodbav:"list_game"`
				ListKey  string `dynamodbav:"list_key"`
			}
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return keyed, fmt.Errorf("decode leaderboard: %w", err)
			}
			d := it.definition()
			if it.ListGame == d.Scope.Game && it.ListKey == listKey(d.Status, d.ID) {
				continue
			}
			upd := listKeys(expression.UpdateBuilder{}, d.Scope.Game, d.Status, d.ID)
			same := expression.Name(schema.AttrVer).Equal(expression.Value(it.Ver))
			_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, map[string]types.AttributeValue{schema.AttrBoardID: ddb.S(d.ID)},
				ddb.MustBuild(expression.NewBuilder().WithUpdate(upd).WithCondition(same))))
			switch {
			case ddb.IsConditionFailed(err):
				// Written since: the write keyed it.
			case err != nil:
				return keyed, unavailable(err, "relist leaderboard "+d.ID)
			default:
				keyed++
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return keyed, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

package privacy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Awaits keeps the counter versions an erasure waits for, one item per
// deleted reaction in the Counters table:
//
//	pk erasure#{user_hash}   sk {kind}#{target}   ver, expires_at
//
// (schema.CountersErasurePrefix).
//
// Items, not an attribute of the erasure record: a user with tens of
// thousands of reactions would not fit DynamoDB's 400 KB item. They are
// keyed by the erasure hash of the user id (Hasher), so they name nobody,
// and read under every version of the key a run may have written them
// under; they are cleared once counted, and the TTL removes those of an
// erasure never finished.
type Awaits struct {
	DB     ddb.DB
	Table  string // Counters, physical name
	Clock  clock.Clock
	Hasher *Hasher
}

const awaitRetention = 7 * 24 * time.Hour

func (a *Awaits) pk(hash string) types.AttributeValue {
	return ddb.S(schema.CountersErasurePrefix + hash)
}

// Add records versions (kind#target → version) for the erasure of user.
// Versions only grow, so a later Add of the same reaction supersedes.
func (a *Awaits) Add(ctx context.Context, user string, versions map[string]int64) error {
	if len(versions) == 0 {
		return nil
	}
	hash := a.Hasher.Hashes(ctx, user)[0]
	expires := ddb.N(a.Clock.Now().Add(awaitRetention).Unix())
	reqs := make([]types.WriteRequest, 0, len(versions))
	for k, v := range versions {
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			schema.AttrPK: a.pk(hash), schema.AttrSK: ddb.S(k), schema.AttrVer: ddb.N(v), schema.TTL: expires,
		}}})
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return fmt.Errorf("privacy: record %d awaited versions: %w", len(reqs), err)
	}
	return nil
}

// List returns the versions recorded for the erasure of user.
func (a *Awaits) List(ctx context.Context, user string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, hash := range a.Hasher.Hashes(ctx, user) {
		versions, err := a.list(ctx, hash)
		if err != nil {
			return nil, err
		}
		for k, v := range versions {
			out[k] = max(out[k], v)
		}
	}
	return out, nil
}

// list returns the versions recorded under hash.
func (a *Awaits) list(ctx context.Context, hash string) (map[string]int64, error) {
	in := ddb.QueryInput(a.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(a.pk(hash))))))
	in.ConsistentRead = aws.Bool(true)
	out := map[string]int64{}
	for {
		page, err := a.DB.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("privacy: list awaited versions: %w", err)
		}
		for _, it := range page.Items {
			sk, _ := it[schema.AttrSK].(*types.AttributeValueMemberS)
			ver, _ := it[schema.AttrVer].(*types.AttributeValueMemberN)
			if sk == nil || ver == nil {
				continue
			}
			v, err := strconv.ParseInt(ver.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("privacy: an awaited version is not an integer: %w", err)
			}
			out[sk.Value] = v
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// Clear drops the versions recorded for the erasure of user.
func (a *Awaits) Clear(ctx context.Context, user string) error {
	var reqs []types.WriteRequest
	for _, hash := range a.Hasher.Hashes(ctx, user) {
		versions, err := a.list(ctx, hash)
		if err != nil {
			return err
		}
		for k := range versions {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
				schema.AttrPK: a.pk(hash), schema.AttrSK: ddb.S(k),
			}}})
		}
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return fmt.Errorf("privacy: clear %d awaited versions: %w", len(reqs), err)
	}
	return nil
}

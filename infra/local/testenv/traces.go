package testenv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"
)

// The checks erasure tests make: does anything still hold a user's id?

// TableItems reads every item of a table (consistent reads).
func TableItems(t testing.TB, db dynamodb.ScanAPIClient, table string) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, page.Items...)
	}
	return items
}

// Mentions reports whether av, or anything nested in it (map keys
// included), contains s.
func Mentions(av types.AttributeValue, s string) bool {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return strings.Contains(v.Value, s)
	case *types.AttributeValueMemberB:
		return strings.Contains(string(v.Value), s)
	case *types.AttributeValueMemberSS:
		return slices.ContainsFunc(v.Value, func(x string) bool { return strings.Contains(x, s) })
	case *types.AttributeValueMemberL:
		return slices.ContainsFunc(v.Value, func(x types.AttributeValue) bool { return Mentions(x, s) })
	case *types.AttributeValueMemberM:
		for k, x := range v.Value {
			if strings.Contains(k, s) || Mentions(x, s) {
				return true
			}
		}
	}
	return false
}

// RedisTraces lists every place in Redis that holds id: the names of the
// keys matching patterns (all keys when none is given), and the members,
// fields and values of each. A key of a type it cannot read fails the test.
func RedisTraces(t testing.TB, rdb redis.UniversalClient, id string, patterns ...string) []string {
	t.Helper()
	if len(patterns) == 0 {
		patterns = []string{"*"}
	}
	ctx := context.Background()
	var found []string
	for _, pattern := range patterns {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if strings.Contains(k, id) {
				found = append(found, "key "+k)
			}
			var parts []string
			switch typ := rdb.Type(ctx, k).Val(); typ {
			case "string":
				parts = []string{rdb.Get(ctx, k).Val()}
			case "hash":
				for f, v := range rdb.HGetAll(ctx, k).Val() {
					parts = append(parts, f, v)
				}
			case "zset":
				parts = rdb.ZRange(ctx, k, 0, -1).Val()
			case "set":
				parts = rdb.SMembers(ctx, k).Val()
			case "list":
				parts = rdb.LRange(ctx, k, 0, -1).Val()
			case "none": // expired meanwhile
			default:
				t.Fatalf("redis key %s is a %s, which the check cannot read", k, typ)
			}
			for _, p := range parts {
				if strings.Contains(p, id) {
					found = append(found, fmt.Sprintf("%s holds %q", k, p))
				}
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return found
}

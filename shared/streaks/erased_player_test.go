package streaks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/apitest"
	"github.com/rallyhq/rally/infra/local/stack"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/schema"
)

// streakTraces lists where the streak side of Redis (cached streaks,
// deadlines, streak boards) holds id: key names, members, fields, values.
func streakTraces(t *testing.T, rdb *redis.Client, id string) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	for _, pattern := range []string{"rally:streak:*", "rally:streaks:*", "rank:{streaks:*"} {
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
			default:
				t.Fatalf("streak key %s is a %s", k, typ)
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

// A player who played in one region, moved to another and played again is
// erased (their Streaks item deleted, as the erasure job does): once the
// stream is processed, nothing on the streak side of Redis holds their id,
// not even on the board of the region they left; another player's streak
// stays where it was.
func TestAnErasedPlayerLeavesNoTraceInTheStreakCache(t *testing.T) {
	srv := testenv.Redis(t)
	s := testenv.Stack(t, stack.Options{RedisURL: srv.URL()})
	c := apitest.New(t, s)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const who = "erase.me-7"
	start := time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC)
	play := func(p *mplayer, day int, region string) {
		t.Helper()
		if p.region != region {
			p.region = region
			setRegion(t, c, p)
		}
		s.Clock().Set(start.Add(time.Duration(day) * 24 * time.Hour))
		body := map[string]any{"event_type": "DAILY_OPEN", "source": "web"}
		if r, err := activity(c, p.id, fmt.Sprintf("%s-%d", p.id, day), body); err != nil || r.Status != 200 {
			t.Fatalf("activity of %s on day %d: %v %d %s", p.id, day, err, r.Status, r.Body)
		}
	}
	erased, ann := &mplayer{id: who}, &mplayer{id: "ann"}
	play(ann, 0, "eu")
	play(erased, 0, "eu")
	play(erased, 1, "eu")
	// A day missed: the sweep drops the deadlines of eu, so only the
	// record's regions still name the board the move leaves a tombstone on.
	play(ann, 3, "eu")
	play(erased, 3, "na")
	waitIdle(t, s)
	if len(streakTraces(t, rdb, who)) == 0 {
		t.Fatal("the player left no trace to erase")
	}
	expect := func(when string, boards map[string]string) {
		t.Helper()
		for region, want := range boards {
			if got := strings.Join(gotTop(t, c, region, 10, false), ", "); got != want {
				t.Fatalf("top of %q %s: %q, want %q", region, when, got, want)
			}
		}
	}
	expect("before erasure", map[string]string{"": "1 ann 1, 2 erase.me-7 1", "eu": "1 ann 1", "na": "1 erase.me-7 1"})

	_, err := s.DB().DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.Tables().Of(schema.Streaks)),
		Key:       map[string]types.AttributeValue{schema.AttrUserID: &types.AttributeValueMemberS{Value: who}},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if found := streakTraces(t, rdb, who); len(found) > 0 {
		t.Fatalf("after erasure Redis still holds the id:\n%s", strings.Join(found, "\n"))
	}
	expect("after erasure", map[string]string{"": "1 ann 1", "eu": "1 ann 1", "na": ""})
}

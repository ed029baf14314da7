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
	"github.com/rallyhq/rally/infra/local/stacktest"
	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/schema"
)

// streakKeys are the streak side of Redis: cached streaks, deadlines,
// streak boards.
var streakKeys = []string{"rally:streak:*", "rally:streaks:*", "rank:{streaks:*"}

// A player who played in one region, moved to another and played again is
// erased (their Streaks item deleted, as the erasure job does): once the
// stream is processed, nothing on the streak side of Redis holds their id,
// not even on the board of the region they left; another player's streak
// stays where it was.
func TestAnErasedPlayerLeavesNoTraceInTheStreakCache(t *testing.T) {
	srv := testenv.Redis(t)
	s := stacktest.Start(t, stack.Options{RedisURL: srv.URL()})
	c := apitest.New(t, s)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const who = "erase.me-7"
	start := time.Date(nextYear, 3, 10, 9, 0, 0, 0, time.UTC)
	// Each activity a minute after the one before on its day, so the one
	// who played first reached their streak first, however fast each call.
	plays := 0
	play := func(p *mplayer, day int, region string) {
		t.Helper()
		if p.region != region {
			p.region = region
			setRegion(t, c, p)
		}
		plays++
		s.Clock().Set(start.Add(time.Duration(day)*24*time.Hour + time.Duration(plays)*time.Minute))
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
	if len(testenv.RedisTraces(t, rdb, who, streakKeys...)) == 0 {
		t.Fatal("the player left no trace to erase")
	}
	expect := func(when string, boards map[string]string) {
		t.Helper()
		for region, want := range boards {
			if got := joined(gotTop(t, c, region, 10, false)); got != want {
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
	if found := testenv.RedisTraces(t, rdb, who, streakKeys...); len(found) > 0 {
		t.Fatalf("after erasure Redis still holds the id:\n%s", strings.Join(found, "\n"))
	}
	expect("after erasure", map[string]string{"": "1 ann 1", "eu": "1 ann 1", "na": ""})
}

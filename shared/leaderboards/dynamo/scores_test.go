package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/streams"
)

// submitAll runs the matches concurrently, one goroutine each, and returns
// their outcomes in the order given.
func submitAll(t *testing.T, s stores, d leaderboards.Definition, period string, ms []leaderboards.Match) []leaderboards.Submitted {
	t.Helper()
	out := make([]leaderboards.Submitted, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if out[i], err = s.scores.Submit(context.Background(), d, period, m, apply(d, m)); err != nil {
				t.Errorf("submit %+v: %v", m, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func currentScore(t *testing.T, s stores, d leaderboards.Definition, period, player string) leaderboards.Score {
	t.Helper()
	got, err := s.scores.Get(context.Background(), d.ID, period, []string{player})
	if err != nil || len(got) != 1 {
		t.Fatalf("score of %s: %+v %v", player, got, err)
	}
	return got[0]
}

func members(t *testing.T, s stores, board, period string) int64 {
	t.Helper()
	n, err := s.scores.Members(context.Background(), board, period)
	if err != nil {
		t.Fatalf("members of %s/%s: %v", board, period, err)
	}
	return n
}

func TestARepeatedMatchAppliesOnceEvenWhenRacing(t *testing.T) {
	s := newStores(t)
	d := board("wins", leaderboards.Increment, leaderboards.Desc, leaderboards.Earliest)
	var ms []leaderboards.Match
	for i := 0; i < 10; i++ {
		ms = append(ms, leaderboards.Match{PlayerID: "ann", MatchID: "m-1", Score: 5, OccurredAt: t0})
	}
	applied, version := 0, int64(0)
	for _, r := range submitAll(t, s, d, leaderboards.AllTime, ms) {
		if r.Applied {
			applied++
			version = r.Current.Version
			if !r.Changed || r.Previous != nil || r.Current.Version < 1 {
				t.Errorf("the applied submission: %+v", r)
			}
		}
		if r.Current.Score != 5 {
			t.Errorf("a submission reports score %d, want 5: %+v", r.Current.Score, r)
		}
	}
	if applied != 1 {
		t.Fatalf("%d of 10 identical submissions applied, want 1", applied)
	}
	if sc := currentScore(t, s, d, leaderboards.AllTime, "ann"); sc.Score != 5 || sc.Version != version {
		t.Fatalf("score after the race: %+v, want 5 at version %d (the applied one)", sc, version)
	}
	if n := members(t, s, d.ID, leaderboards.AllTime); n != 1 {
		t.Fatalf("members %d, want 1", n)
	}
}

func TestConcurrentSubmissionsForOnePlayerAllCount(t *testing.T) {
	for _, c := range []struct {
		policy leaderboards.Policy
		want   int64
	}{{leaderboards.Best, 20}, {leaderboards.Increment, 210}} {
		t.Run(string(c.policy), func(t *testing.T) {
			s := newStores(t)
			d := board("b-"+string(c.policy), c.policy, leaderboards.Desc, leaderboards.Earliest)
			var ms []leaderboards.Match
			for _, i := range rand.Perm(20) {
				ms = append(ms, leaderboards.Match{PlayerID: "bo", MatchID: fmt.Sprintf("m%d", i+1), Score: int64(i + 1),
					OccurredAt: t0.Add(time.Duration(i) * time.Second)})
			}
			changes, first := int64(0), int64(0)
			for _, r := range submitAll(t, s, d, leaderboards.AllTime, ms) {
				if !r.Applied {
					t.Errorf("a distinct match was not applied: %+v", r)
				}
				if r.Changed {
					changes++
				}
				if r.Previous == nil {
					first = r.Current.Version
				}
			}
			sc := currentScore(t, s, d, leaderboards.AllTime, "bo")
			if sc.Score != c.want {
				t.Fatalf("%s: final score %d, want %d", c.policy, sc.Score, c.want)
			}
			if sc.Version-first+1 != changes {
				t.Fatalf("%s: version %d after %d changes from %d", c.policy, sc.Version, changes, first)
			}
			if n := members(t, s, d.ID, leaderboards.AllTime); n != 1 {
				t.Fatalf("members %d, want 1", n)
			}
		})
	}
}

func TestAWorseBestScoreIsRecordedButChangesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("best", leaderboards.Best, leaderboards.Desc, leaderboards.Earliest)
	submit := func(m leaderboards.Match) leaderboards.Submitted {
		t.Helper()
		r, err := s.scores.Submit(ctx, d, leaderboards.AllTime, m, apply(d, m))
		if err != nil {
			t.Fatalf("submit %+v: %v", m, err)
		}
		return r
	}
	// Nanoseconds are dropped: every store and cache keeps milliseconds.
	first := submit(leaderboards.Match{PlayerID: "cy", MatchID: "m1", Score: 100, OccurredAt: t0.Add(1500 * time.Microsecond)})
	if !first.Applied || !first.Changed || first.Current.Score != 100 || !first.Current.ReachedAt.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("first score: %+v", first)
	}
	lower := submit(leaderboards.Match{PlayerID: "cy", MatchID: "m2", Score: 50, OccurredAt: t0.Add(time.Minute)})
	if !lower.Applied || lower.Changed || lower.Current.Score != 100 || lower.Current.Version != first.Current.Version || lower.Previous == nil || lower.Previous.Score != 100 {
		t.Fatalf("a lower best score: %+v", lower)
	}
	again := submit(leaderboards.Match{PlayerID: "cy", MatchID: "m2", Score: 500, OccurredAt: t0.Add(2 * time.Minute)})
	if again.Applied || again.Changed || again.Current.Score != 100 {
		t.Fatalf("resubmitting a recorded match id must change nothing: %+v", again)
	}
	if sc := currentScore(t, s, d, leaderboards.AllTime, "cy"); sc.Score != 100 || sc.Version != first.Current.Version || sc.LastMatchID != "m1" {
		t.Fatalf("score %+v, want 100 from m1 at its first version", sc)
	}
}

// A match id is remembered across periods: a retry that lands after the
// period turned answers with the period the match was applied in.
func TestARetryAcrossAPeriodBoundaryIsRecognised(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("daily", leaderboards.Increment, leaderboards.Desc, leaderboards.Earliest)
	d.Reset = leaderboards.Daily
	m := leaderboards.Match{PlayerID: "di", MatchID: "late", Score: 3, OccurredAt: t0}
	if r, err := s.scores.Submit(ctx, d, "2026-11-22", m, apply(d, m)); err != nil || !r.Applied {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err := s.scores.Submit(ctx, d, "2026-11-23", m, apply(d, m))
	if err != nil || r.Applied || r.Current.Period != "2026-11-22" || r.Current.Score != 3 {
		t.Fatalf("retry next day: %+v %v, want not applied, score 3 in 2026-11-22", r, err)
	}
	if n := members(t, s, d.ID, "2026-11-23"); n != 0 {
		t.Fatalf("the retry joined the next day's board: %d members", n)
	}
}

func TestMembersCountDistinctPlayersPerPeriod(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("count", leaderboards.Latest, leaderboards.Desc, leaderboards.Earliest)
	for i := 0; i < 9; i++ {
		for _, period := range []string{"p1", "p2"} {
			if period == "p2" && i%3 != 0 {
				continue
			}
			m := leaderboards.Match{PlayerID: fmt.Sprintf("u%d", i%3), MatchID: fmt.Sprintf("%s-%d", period, i), Score: int64(i), OccurredAt: t0.Add(time.Duration(i) * time.Second)}
			if _, err := s.scores.Submit(ctx, d, period, m, apply(d, m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := members(t, s, d.ID, "p1"); n != 3 {
		t.Fatalf("p1 members %d, want 3", n)
	}
	if n := members(t, s, d.ID, "p2"); n != 1 {
		t.Fatalf("p2 members %d, want 1", n)
	}
	got, err := s.scores.Get(ctx, d.ID, "p1", []string{"u2", "nobody", "u0", "u2", "#meta"})
	if err != nil || len(got) != 2 || got[0].PlayerID != "u2" || got[0].Score != 8 || got[1].PlayerID != "u0" || got[1].Score != 6 {
		t.Fatalf("get: %+v %v", got, err)
	}
}

func TestSubmitReturnsTheUpdatesErrorAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("inc", leaderboards.Increment, leaderboards.Desc, leaderboards.Earliest)
	m := leaderboards.Match{PlayerID: "ed", MatchID: "a", Score: leaderboards.MaxScore, OccurredAt: t0}
	if _, err := s.scores.Submit(ctx, d, leaderboards.AllTime, m, apply(d, m)); err != nil {
		t.Fatal(err)
	}
	over := leaderboards.Match{PlayerID: "ed", MatchID: "b", Score: 1, OccurredAt: t0.Add(time.Second)}
	if _, err := s.scores.Submit(ctx, d, leaderboards.AllTime, over, apply(d, over)); !errs.Is(err, errs.Conflict) {
		t.Fatalf("overflowing total: %v, want the policy's Conflict", err)
	}
	// The refused match was not recorded, so it can be submitted again.
	over.Score = -1
	if r, err := s.scores.Submit(ctx, d, leaderboards.AllTime, over, apply(d, over)); err != nil || !r.Applied || r.Current.Score != leaderboards.MaxScore-1 {
		t.Fatalf("the refused match id resubmitted: %+v %v", r, err)
	}
	before := leaderboards.Match{PlayerID: "fay", MatchID: "x", Score: 1, OccurredAt: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := s.scores.Submit(ctx, d, leaderboards.AllTime, before, apply(d, before)); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a score reached before 1970: %v, want Invalid", err)
	}
}

// The leaderboard processor reads scores from the Scores stream; a stored
// item must decode to the score Submit returned, and the member count to
// nothing.
func TestScoreFromRecordDecodesStoredItems(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	d := board("stream", leaderboards.Best, leaderboards.Asc, leaderboards.Earliest)
	m := leaderboards.Match{PlayerID: "gus", MatchID: "r1", Score: 4200, OccurredAt: t0}
	r, err := s.scores.Submit(ctx, d, "all", m, apply(d, m))
	if err != nil {
		t.Fatal(err)
	}
	record := func(player string) events.DynamoDBEventRecord {
		out, err := s.scores.DB.(*dynamodb.Client).GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.scores.Table),
			Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: dynamo.PeriodKey(d.ID, "all")}, "player_id": &types.AttributeValueMemberS{Value: player}},
		})
		if err != nil || len(out.Item) == 0 {
			t.Fatalf("read item %s: %v", player, err)
		}
		return events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{NewImage: streams.FromItem(out.Item), SequenceNumber: "1"}}
	}
	got, ok, err := dynamo.ScoreFromRecord(record("gus"))
	if err != nil || !ok || got.Score != 4200 || got.Version != r.Current.Version || got.Board != d.ID || got.Period != "all" ||
		!got.ReachedAt.Equal(r.Current.ReachedAt) || !got.UpdatedAt.Equal(r.Current.UpdatedAt) || got.LastMatchID != "r1" {
		t.Fatalf("decoded %+v ok=%v err=%v, submitted %+v", got, ok, err, r.Current)
	}
	if _, ok, err := dynamo.ScoreFromRecord(record(dynamo.MetaID)); ok || err != nil {
		t.Fatalf("the meta item decoded as a score: ok=%v err=%v", ok, err)
	}
}

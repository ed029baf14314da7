package dynamo_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// The members a chunk of an import adds are counted once per chunk of a
// job: a run applying the chunk again after one cut short (which finds
// some of its players in and counts fewer) adds nothing, nor does a chunk
// a resumed run goes back over; the next chunk, and another job, count.
// Once the job catches up its mark is gone, and a period with no meta
// item gets none.
func TestAnImportChunkCountsItsMembersOnce(t *testing.T) {
	ctx := context.Background()
	s := newStores(t)
	bp := leaderboards.BoardPeriod{Board: "arena", Period: leaderboards.AllTime}
	count := func(job string, line, n int64) {
		t.Helper()
		chunk := leaderboards.ImportChunk{Job: job, Line: line}
		if _, err := s.scores.Import(ctx, chunk, nil, nil, map[leaderboards.BoardPeriod]int64{bp: n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		what      string
		job       string
		line, add int64
		want      int64
	}{
		{"the first chunk", "job-a", 1, 3, 3},
		{"the same chunk again, counting fewer", "job-a", 1, 1, 3},
		{"the same chunk again, counting as many", "job-a", 1, 3, 3},
		{"the next chunk", "job-a", 1001, 2, 5},
		{"an earlier chunk gone over again", "job-a", 1, 3, 5},
		{"another job's first chunk", "job-b", 1, 4, 9},
		{"that chunk again", "job-b", 1, 4, 9},
	}
	for _, st := range steps {
		count(st.job, st.line, st.add)
		if got, err := s.scores.Members(ctx, bp.Board, bp.Period); err != nil || got != st.want {
			t.Fatalf("after %s: %d members (%v), want %d", st.what, got, err, st.want)
		}
	}

	for _, job := range []string{"job-a", "job-b"} {
		if err := s.scores.ForgetImport(ctx, bp, job); err != nil {
			t.Fatal(err)
		}
	}
	meta := s.item(t, dynamo.PeriodKey(bp.Board, bp.Period), dynamo.MetaID)
	if len(meta) == 0 {
		t.Fatal("the meta item is gone")
	}
	for name := range meta {
		if name != schema.AttrPK && name != schema.AttrPlayerID && name != schema.AttrMembers {
			t.Errorf("the meta item keeps %s after the imports caught up", name)
		}
	}
	// A job counts from its next chunk on as if new once forgotten (it is
	// forgotten only when it has none left).
	count("job-a", 2001, 1)
	if got, _ := s.scores.Members(ctx, bp.Board, bp.Period); got != 10 {
		t.Fatalf("after a forgotten job's chunk: %d members, want 10", got)
	}

	if err := s.scores.ForgetImport(ctx, leaderboards.BoardPeriod{Board: "gone", Period: leaderboards.AllTime}, "job-a"); err != nil {
		t.Fatal(err)
	}
	if item := s.item(t, dynamo.PeriodKey("gone", leaderboards.AllTime), dynamo.MetaID); len(item) != 0 {
		t.Fatalf("forgetting an import wrote a meta item where there was none: %v", item)
	}
}

// item reads a Scores item, nil when there is none.
func (s stores) item(t *testing.T, pk, player string) map[string]types.AttributeValue {
	t.Helper()
	out, err := s.scores.DB.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.scores.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{schema.AttrPK: ddb.S(pk), schema.AttrPlayerID: ddb.S(player)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

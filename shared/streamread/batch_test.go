package streamread_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/infra/local/testenv/await"
	"github.com/rallyhq/rally/shared/reactions"
	rdynamo "github.com/rallyhq/rally/shared/reactions/dynamo"
	"github.com/rallyhq/rally/shared/schema"
	"github.com/rallyhq/rally/shared/streamread"
)

// A parked batch is read back from the stream exactly, from its first
// through its last sequence number; once the stream no longer holds its
// first record, reading it is ErrExpired, not a shorter batch.
func TestReadRangeReadsExactlyTheParkedBatch(t *testing.T) {
	ctx := context.Background()
	db, names, endpoint := testenv.DynamoDB(t)
	table := names.Of(schema.Reactions)
	edges := &rdynamo.Edges{DB: db, Table: table}
	for i := 0; i < 6; i++ {
		ref := reactions.Ref{UserID: "u1", Kind: reactions.Favorite, TargetID: fmt.Sprintf("g%d", i)}
		if _, _, err := edges.Add(ctx, ref, time.Now(), reactions.InTrending); err != nil {
			t.Fatal(err)
		}
	}
	streams := testenv.StreamsClient(endpoint)
	arn, err := streamread.StreamARN(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	var shard streamread.ShardRecords
	await.Success(t, 10*time.Second, "6 records on the stream", func() error {
		shards, err := streamread.All(ctx, streams, arn, testenv.Region)
		if err != nil {
			return err
		}
		for _, sh := range shards {
			if len(sh.Records) >= 6 {
				shard = sh
				return nil
			}
		}
		return errors.New("not yet")
	})
	seqs := make([]string, len(shard.Records))
	for i, r := range shard.Records {
		seqs[i] = r.Change.SequenceNumber
	}
	b := streamread.BatchInfo{ShardID: shard.ShardID, StartSequenceNumber: seqs[1], EndSequenceNumber: seqs[3], StreamARN: arn, BatchSize: 3}
	got, err := streamread.ReadRange(ctx, streams, b, testenv.Region)
	if err != nil {
		t.Fatal(err)
	}
	var gotSeqs []string
	for _, r := range got {
		gotSeqs = append(gotSeqs, r.Change.SequenceNumber)
	}
	if fmt.Sprint(gotSeqs) != fmt.Sprint(seqs[1:4]) {
		t.Fatalf("read %v, want %v", gotSeqs, seqs[1:4])
	}
	gone := streamread.Retained{Client: streams, Gone: func(time.Time) bool { return true }}
	if _, err := streamread.ReadRange(ctx, gone, b, testenv.Region); !errors.Is(err, streamread.ErrExpired) {
		t.Fatalf("reading a range the stream no longer holds: %v, want ErrExpired", err)
	}
}

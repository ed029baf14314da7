package dynamo_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/leaderboards/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// Buckets follow the scores (a better score is never in a worse bucket),
// small magnitudes are exact, every score up to ±2^53 fits in the
// bounded number of buckets the histogram's items hold, and each score is
// in the bucket the stored format numbers it.
func TestBucketsFollowTheScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() int64 {
		switch rng.IntN(3) {
		case 0:
			return rng.Int64N(600) - 300
		case 1:
			return rng.Int64N(2_000_000) - 1_000_000
		default:
			return rng.Int64N(2*leaderboards.MaxScore+1) - leaderboards.MaxScore
		}
	}
	for range 200_000 {
		a, b := draw(), draw()
		if a > b {
			a, b = b, a
		}
		if dynamo.Bucket(a) > dynamo.Bucket(b) {
			t.Fatalf("Bucket(%d) = %d > Bucket(%d) = %d", a, dynamo.Bucket(a), b, dynamo.Bucket(b))
		}
		if got, want := dynamo.Bucket(a), bucketByHand(a); got != want {
			t.Fatalf("Bucket(%d) = %d, the stored format numbers it %d", a, got, want)
		}
	}
	for k := 8; k <= 53; k++ { // each side of every doubling
		for _, v := range []int64{1<<k - 1, 1 << k, 1<<k + 1} {
			for _, s := range []int64{v, -v} {
				if got, want := dynamo.Bucket(s), bucketByHand(s); got != want {
					t.Fatalf("Bucket(%d) = %d, the stored format numbers it %d", s, got, want)
				}
			}
		}
	}
	for v := int64(-255); v <= 255; v++ {
		if dynamo.Bucket(v) != int(v) {
			t.Fatalf("small score %d is in bucket %d, not its own", v, dynamo.Bucket(v))
		}
	}
	top, bottom := dynamo.Bucket(leaderboards.MaxScore), dynamo.Bucket(-leaderboards.MaxScore)
	if top-bottom+1 > 96<<dynamo.BucketBits {
		t.Fatalf("buckets %d..%d do not fit in 96 items", bottom, top)
	}
	// Wide buckets are at most 1/128 of their scores wide.
	for _, v := range []int64{1000, 123_456, 1 << 40, leaderboards.MaxScore} {
		lo, hi := v, v
		for dynamo.Bucket(lo-1) == dynamo.Bucket(v) {
			lo -= max(1, (hi-lo+1)/2)
		}
		for dynamo.Bucket(hi+1) == dynamo.Bucket(v) && hi < leaderboards.MaxScore {
			hi += max(1, (hi-lo+1)/2)
		}
		if float64(hi-lo) > float64(v)/64 {
			t.Fatalf("the bucket of %d spans about %d..%d", v, lo, hi)
		}
	}
}

// countingDB counts the calls that read, as a rank request's cost.
type countingDB struct {
	ddb.DB
	reads atomic.Int64
	// items counts the items Query calls returned.
	items atomic.Int64
}

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.reads.Add(1)
	return c.DB.GetItem(ctx, in, o...)
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.reads.Add(1)
	out, err := c.DB.Query(ctx, in, o...)
	if err == nil {
		c.items.Add(int64(len(out.Items)))
	}
	return out, err
}

func (c *countingDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.reads.Add(1)
	return c.DB.BatchGetItem(ctx, in, o...)
}

// histBoard is a board whose scores live in DynamoDB Local with a
// histogram kept by Tally, and the brute-force model of it.
type histBoard struct {
	d      leaderboards.Definition
	scores *dynamo.Scores
	db     *countingDB
	// live are the visible scores by player.
	live map[string]leaderboards.Score
}

const estimateFrom, exactTop = 1_000, 100

func newHistBoard(t testing.TB, o leaderboards.Order, tb leaderboards.TieBreak) *histBoard {
	db, names, _ := testenv.DynamoDB(t)
	cdb := &countingDB{DB: db}
	d := board("hist", leaderboards.Latest, o, tb)
	return &histBoard{d: d, db: cdb, live: map[string]leaderboards.Score{}, scores: &dynamo.Scores{
		DB: cdb, Table: names.Of(schema.Scores), Events: names.Of(schema.ScoreEvents), Counters: names.Of(schema.Counters),
		Clock: &fixedClock{at: t0}, EstimateFrom: estimateFrom, ExactTop: exactTop,
	}}
}

// drawScore mixes the shapes a board takes: a crowd around a typical
// score, small integer scores with many ties, a long tail, and negatives.
func drawScore(rng *rand.Rand) int64 {
	switch r := rng.IntN(10); {
	case r < 6:
		return 4000 + rng.Int64N(1000) + rng.Int64N(1000) + rng.Int64N(1000)
	case r < 8:
		return rng.Int64N(300)
	case r < 9:
		return rng.Int64N(1 << (10 + rng.IntN(30)))
	default:
		return -rng.Int64N(50_000)
	}
}

// put writes scores as the store writes them, in batches, and keeps the
// member count; tally then applies them to the histogram as the
// processor does, in stream-sized batches.
func (h *histBoard) put(t testing.TB, scores []leaderboards.Score) {
	t.Helper()
	ctx := context.Background()
	reqs := make([]types.WriteRequest, 0, len(scores))
	for _, s := range scores {
		item, err := attributevalue.MarshalMap(dynamo.ScoreItem(h.d.Order, s))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		h.live[s.PlayerID] = s
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w * ddb.MaxBatchWrite; i < len(reqs); i += writers * ddb.MaxBatchWrite {
				if err := ddb.BatchWrite(ctx, h.db, h.scores.Table, reqs[i:min(len(reqs), i+ddb.MaxBatchWrite)]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := h.scores.SetMembers(ctx, h.d.ID, leaderboards.AllTime, int64(len(h.live))); err != nil {
		t.Fatal(err)
	}
}

func (h *histBoard) tally(t testing.TB, changes []leaderboards.Score) {
	t.Helper()
	for batch := range slices.Chunk(changes, 500) {
		if err := h.scores.Tally(context.Background(), h.d.ID, leaderboards.AllTime, batch); err != nil {
			t.Fatal(err)
		}
	}
}

// model ranks the live scores as the board must.
func (h *histBoard) model() (ranked []leaderboards.Entry, at map[string]int) {
	ranked = make([]leaderboards.Entry, 0, len(h.live))
	for _, s := range h.live {
		ranked = append(ranked, leaderboards.Entry{PlayerID: s.PlayerID, Score: s.Score, ReachedAt: s.ReachedAt})
	}
	ranked = rankedByHand(h.d.Order, h.d.TieBreak, ranked)
	at = make(map[string]int, len(ranked))
	for i, e := range ranked {
		at[e.PlayerID] = i
	}
	return ranked, at
}

// histogramIsTheModels checks the stored histogram counts exactly the
// live scores.
func (h *histBoard) histogramIsTheModels(t testing.TB, when string) {
	t.Helper()
	got, err := h.scores.Histogram(context.Background(), h.d.ID, leaderboards.AllTime)
	if err != nil {
		t.Fatal(err)
	}
	want := histogramByHand(h.live)
	if got.Total != want.Total || !maps.Equal(got.Counts, want.Counts) {
		t.Fatalf("%s: the histogram counts %d players, the model %d (%d buckets vs %d)", when, got.Total, want.Total, len(got.Counts), len(want.Counts))
	}
}

// rankStats are what probing ranks found.
type rankStats struct {
	probes, approximate   int
	maxErr, sumErr        int64
	maxBound              int64
	maxReads, sumReads    int64
	readsProbed           int
	exactNearTheTop       int
	neighbourWindowsEqual int
}

func (r rankStats) String() string {
	mean, reads := 0.0, 0.0
	if r.approximate > 0 {
		mean = float64(r.sumErr) / float64(r.approximate)
	}
	if r.readsProbed > 0 {
		reads = float64(r.sumReads) / float64(r.readsProbed)
	}
	return fmt.Sprintf("%d probes, %d approximate: error max %d mean %.1f (largest bound %d); %d exact near the top; reads per rank (k=0, approximate) max %d mean %.2f",
		r.probes, r.approximate, r.maxErr, mean, r.maxBound, r.exactNearTheTop, r.maxReads, reads)
}

// probe ranks players (k=0 and k=2) and checks each against the model:
// an exact rank equal to it, an approximate one within its bound, the
// neighbours the model's, and at most 3 reads for a rank without
// neighbours.
func (h *histBoard) probe(t testing.TB, players []string, k int) rankStats {
	t.Helper()
	ranked, at := h.model()
	var st rankStats
	for _, p := range players {
		h.probeOne(t, ranked, at, p, k, &st)
	}
	return st
}

// probeOne ranks one player against the model ranked (at places each
// player in it) and adds what it found to st.
func (h *histBoard) probeOne(t testing.TB, ranked []leaderboards.Entry, at map[string]int, p string, k int, st *rankStats) {
	t.Helper()
	ctx := context.Background()
	i, ok := at[p]
	if !ok {
		return
	}
	want := ranked[i]
	before := h.db.reads.Load()
	pl, err := h.scores.Around(ctx, h.d, leaderboards.AllTime, p, 0)
	reads := h.db.reads.Load() - before
	if err != nil {
		t.Fatalf("rank %s: %v", p, err)
	}
	st.probes++
	diff := int64(pl.Self.Rank - want.Rank)
	if diff < 0 {
		diff = -diff
	}
	switch {
	case !pl.Approximate && diff != 0:
		t.Fatalf("%s: exact rank %d, the model's %d", p, pl.Self.Rank, want.Rank)
	case !pl.Approximate && int64(want.Rank) > h.scores.ExactTop && int64(len(h.live)) >= h.scores.EstimateFrom:
		t.Fatalf("%s at rank %d of %d was counted, not estimated", p, want.Rank, len(h.live))
	case !pl.Approximate:
		st.exactNearTheTop++
	case diff > pl.RankError:
		t.Fatalf("%s: rank %d ± %d, the model's %d", p, pl.Self.Rank, pl.RankError, want.Rank)
	default:
		st.approximate++
		st.sumErr += diff
		st.maxErr = max(st.maxErr, diff)
		st.maxBound = max(st.maxBound, pl.RankError)
		st.sumReads += reads
		st.readsProbed++
		st.maxReads = max(st.maxReads, reads)
		if reads > 3 {
			t.Fatalf("%s: an approximate rank took %d reads", p, reads)
		}
	}
	if pl.Total != int64(len(h.live)) || pl.Self.Score != want.Score {
		t.Fatalf("%s: total %d score %d, the model's %d and %d", p, pl.Total, pl.Self.Score, len(h.live), want.Score)
	}
	if k == 0 {
		return
	}
	// The neighbours are the model's, ranked relative to the player.
	pl, err = h.scores.Around(ctx, h.d, leaderboards.AllTime, p, k)
	if err != nil {
		t.Fatal(err)
	}
	model := ranked[max(0, i-k):min(len(ranked), i+k+1)]
	if len(pl.Window) != len(model) {
		t.Fatalf("%s: %d neighbours, the model %d", p, len(pl.Window), len(model))
	}
	for j, e := range pl.Window {
		if e.PlayerID != model[j].PlayerID || e.Score != model[j].Score {
			t.Fatalf("%s: neighbour %d is %s (%d), the model's %s (%d)", p, j, e.PlayerID, e.Score, model[j].PlayerID, model[j].Score)
		}
		if h.d.TieBreak != leaderboards.Shared && e.Rank-pl.Self.Rank != model[j].Rank-want.Rank {
			t.Fatalf("%s: neighbour %s is %d from the player, in the model %d", p, e.PlayerID, e.Rank-pl.Self.Rank, model[j].Rank-want.Rank)
		}
	}
	st.neighbourWindowsEqual++
}

// probes picks players spread over the model's ranks, and the top ones.
func (h *histBoard) probes(n int) []string {
	ranked, _ := h.model()
	var out []string
	for i := 0; i < min(20, len(ranked)); i++ {
		out = append(out, ranked[i].PlayerID)
	}
	step := max(1, len(ranked)/n)
	for i := 0; i < len(ranked); i += step {
		out = append(out, ranked[i].PlayerID)
	}
	return append(out, ranked[len(ranked)-1].PlayerID)
}

// Without Redis, a big board's ranks come from its histogram: every
// probed player's estimate holds the model's rank within its bound, the
// top is counted exactly, neighbours are the model's, and a rank costs
// at most 3 reads. The histogram, kept by Tally from stream-sized
// batches, equals the model's after redelivered and stale batches, score
// changes, removals, bans and unbans; a recompute restores it when lost.
func TestHistogramRanksStayWithinTheirBound(t *testing.T) {
	for _, c := range []struct {
		o  leaderboards.Order
		tb leaderboards.TieBreak
	}{{leaderboards.Desc, leaderboards.Earliest}, {leaderboards.Asc, leaderboards.Shared}} {
		t.Run(string(c.o)+"_"+string(c.tb), func(t *testing.T) {
			t.Parallel()
			checkHistogramRanks(t, c.o, c.tb)
		})
	}
}

func checkHistogramRanks(t *testing.T, o leaderboards.Order, tb leaderboards.TieBreak) {
	ctx := context.Background()
	h := newHistBoard(t, o, tb)
	n := testenv.Scale(3_000, 40_000)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d members", seed, n)
	rng := rand.New(rand.NewPCG(seed, 3))
	first := make([]leaderboards.Score, n)
	for i := range first {
		first[i] = leaderboards.Score{Board: h.d.ID, Period: leaderboards.AllTime, PlayerID: fmt.Sprintf("p%06d", i),
			Score: drawScore(rng), ReachedAt: t0.Add(time.Duration(rng.IntN(5)) * time.Second), Version: 10, UpdatedAt: t0}
	}
	start := time.Now()
	h.put(t, first)
	h.tally(t, first)
	t.Logf("%d scores written and tallied in %v", n, time.Since(start).Round(time.Millisecond))
	h.histogramIsTheModels(t, "after the first scores")

	// A redelivered batch, and a stale record (an older version of a
	// counted score), change nothing.
	h.tally(t, first[:500])
	stale := first[7]
	stale.Score, stale.Version = stale.Score+1_000_000, stale.Version-1
	h.tally(t, []leaderboards.Score{stale})
	h.histogramIsTheModels(t, "after a redelivery")

	st := h.probe(t, h.probes(testenv.Scale(150, 1_000)), 2)
	t.Logf("first scores: %s", st)
	if st.approximate == 0 || st.exactNearTheTop == 0 {
		t.Fatalf("the probes did not reach both paths: %s", st)
	}

	// Scores move, some are removed (a cheater, an erasure: the item is
	// deleted, the stream brings its old image one version on), some are
	// banned (hidden at the ban's version), and some of those unbanned.
	ids := slices.Sorted(maps.Keys(h.live))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	tenth := len(ids) / 10
	moved, removed, banned := ids[:tenth], ids[tenth:tenth+tenth/2], ids[tenth+tenth/2:tenth+tenth/2+20]
	var changes, movedScores []leaderboards.Score
	for _, p := range moved {
		s := h.live[p]
		s.Score, s.Version, s.ReachedAt = drawScore(rng), s.Version+1, s.ReachedAt.Add(time.Minute)
		movedScores = append(movedScores, s)
		changes = append(changes, s)
	}
	h.put(t, movedScores)
	var gone []types.WriteRequest
	for _, p := range removed {
		s := h.live[p]
		s.Version, s.Removed = s.Version+1, true
		changes = append(changes, s)
		delete(h.live, p)
		gone = append(gone, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(dynamo.PeriodKey(h.d.ID, leaderboards.AllTime)), schema.AttrPlayerID: ddb.S(p)}}})
	}
	if err := ddb.BatchWrite(ctx, h.db, h.scores.Table, gone); err != nil {
		t.Fatal(err)
	}
	for _, p := range banned {
		if _, _, err := h.scores.Ban(ctx, p, []string{h.d.ID}); err != nil {
			t.Fatal(err)
		}
		s := h.live[p]
		s.Version, s.Removed = s.Version+1, true
		changes = append(changes, s)
		delete(h.live, p)
	}
	rng.Shuffle(len(changes), func(i, j int) { changes[i], changes[j] = changes[j], changes[i] })
	h.tally(t, changes)
	h.tally(t, changes) // the whole batch again: a retry after a partial failure
	h.histogramIsTheModels(t, "after moves, removals and bans")
	for _, p := range append(slices.Clone(removed[:3]), banned[:3]...) {
		if _, _, ok, err := h.scores.Marker(ctx, h.d.ID, leaderboards.AllTime, p); err != nil || ok {
			t.Fatalf("%s left the board but the histogram still marks them: %v %v", p, ok, err)
		}
	}
	var back []leaderboards.Score
	for _, p := range banned[:10] {
		if _, err := h.scores.Unban(ctx, p, []string{h.d.ID}, func(string) leaderboards.Order { return o }); err != nil {
			t.Fatal(err)
		}
		got, err := h.scores.Get(ctx, h.d.ID, leaderboards.AllTime, []string{p})
		if err != nil || len(got) != 1 {
			t.Fatalf("unbanned %s: %v %v", p, got, err)
		}
		h.live[p] = got[0]
		back = append(back, got[0])
	}
	h.tally(t, back)
	h.tally(t, back)
	h.histogramIsTheModels(t, "after unbans")
	if err := h.scores.SetMembers(ctx, h.d.ID, leaderboards.AllTime, int64(len(h.live))); err != nil {
		t.Fatal(err)
	}
	probed := append(h.probes(testenv.Scale(100, 1_000)), moved[:20]...)
	st = h.probe(t, append(probed, banned[:10]...), 2)
	t.Logf("after the changes: %s", st)

	// The disaster: the histogram and some markers lost; a recompute
	// brings back exactly the model's, and a second one finds nothing.
	lost := 0
	for _, it := range testenv.TableItems(t, h.db, h.scores.Counters) {
		if lost%3 == 0 {
			if _, err := h.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(h.scores.Counters),
				Key: map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK], schema.AttrSK: it[schema.AttrSK]}}); err != nil {
				t.Fatal(err)
			}
		}
		lost++
	}
	rewritten, err := h.scores.RecomputeHistogram(ctx, h.d.ID, leaderboards.AllTime)
	if err != nil || rewritten == 0 {
		t.Fatalf("recompute: %d rewritten, %v", rewritten, err)
	}
	h.histogramIsTheModels(t, "after the recompute")
	if again, err := h.scores.RecomputeHistogram(ctx, h.d.ID, leaderboards.AllTime); err != nil || again != 0 {
		t.Fatalf("a second recompute rewrote %d: %v", again, err)
	}
	// The markers are back too: a change after it moves the count once.
	s := h.live[moved[0]]
	s.Score, s.Version = s.Score+7, s.Version+1
	h.put(t, []leaderboards.Score{s})
	h.tally(t, []leaderboards.Score{s})
	h.histogramIsTheModels(t, "after a change past the recompute")
}

// BenchmarkHistogramRanksAtAMillion measures the Redis-less rank of a
// board of a million members (RALLY_BENCH_HIST_MEMBERS) with the
// production thresholds. Each iteration ranks one player (k=0) of a
// spread over the board (its top included, in random order) and checks the estimate holds
// the brute-force model's rank within its bound; the benchmark reports the
// estimates' error against the model (max-rank-error, mean-rank-error, as
// a share of the board max-error-%, and the largest bound), the DynamoDB
// reads per rank (reads/rank, max-reads/rank) and per rank with k=4
// neighbours (reads/rank-k4, the neighbours' index queries). Loading a
// million members takes minutes, so it runs only with RALLY_BENCH_SCALE=1:
//
//	RALLY_BENCH_SCALE=1 go test ./shared/leaderboards/dynamo -run '^$' -bench HistogramRanksAtAMillion -benchtime 2000x -timeout 120m
//
// The scores are written with BatchWriteItem and the histogram as the
// model counts it, not through a million transactions. DynamoDB Local
// keeps the tables on the Java heap: give it room (JAVA_TOOL_OPTIONS=-Xmx12g).
func BenchmarkHistogramRanksAtAMillion(b *testing.B) {
	if os.Getenv("RALLY_BENCH_SCALE") == "" {
		b.Skip("set RALLY_BENCH_SCALE=1 to load a board of a million members")
	}
	n := 1_000_000
	if v := os.Getenv("RALLY_BENCH_HIST_MEMBERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	h := newHistBoard(b, leaderboards.Desc, leaderboards.Earliest)
	h.scores.EstimateFrom, h.scores.ExactTop = dynamo.DefaultEstimateFrom, dynamo.DefaultExactTop
	rng := rand.New(rand.NewPCG(42, 42))
	all := make([]leaderboards.Score, n)
	for i := range all {
		all[i] = leaderboards.Score{Board: h.d.ID, Period: leaderboards.AllTime, PlayerID: fmt.Sprintf("p%07d", i),
			Score: drawScore(rng), ReachedAt: t0.Add(time.Duration(rng.IntN(86_400_000)) * time.Millisecond), Version: 1, UpdatedAt: t0}
	}
	start := time.Now()
	for chunk := range slices.Chunk(all, 100_000) {
		h.put(b, chunk)
		b.Logf("%d scores written, %v", len(h.live), time.Since(start).Round(time.Second))
	}
	hist := histogramByHand(h.live)
	if err := h.scores.PutHistogram(ctx, h.d.ID, leaderboards.AllTime, hist); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d scores and a histogram of %d buckets written in %v", n, len(hist.Counts), time.Since(start).Round(time.Second))

	ranked, at := h.model()
	probes := h.probes(2_000)
	// In random order, so that however many iterations run, they sample
	// the whole board.
	rng.Shuffle(len(probes), func(i, j int) { probes[i], probes[j] = probes[j], probes[i] })
	var st rankStats
	i := 0
	for b.Loop() {
		h.probeOne(b, ranked, at, probes[i%len(probes)], 0, &st)
		i++
	}
	b.Logf("%d members, k=0: %s", n, st)
	if st.approximate == 0 {
		b.Fatalf("no probe was estimated: %s", st)
	}
	b.ReportMetric(float64(st.maxErr), "max-rank-error")
	b.ReportMetric(float64(st.sumErr)/float64(st.approximate), "mean-rank-error")
	b.ReportMetric(100*float64(st.maxErr)/float64(n), "max-error-%")
	b.ReportMetric(float64(st.maxBound), "max-rank-bound")
	b.ReportMetric(float64(st.sumReads)/float64(st.readsProbed), "reads/rank")
	b.ReportMetric(float64(st.maxReads), "max-reads/rank")

	// With neighbours: the rank's reads, and the index queries the
	// neighbours take (two per index shard).
	var reads int64
	const withNeighbours = 50
	for j := range withNeighbours {
		p := ranked[len(ranked)/2+j*(len(ranked)/2/withNeighbours)].PlayerID
		before := h.db.reads.Load()
		if _, err := h.scores.Around(ctx, h.d, leaderboards.AllTime, p, 4); err != nil {
			b.Fatal(err)
		}
		reads += h.db.reads.Load() - before
	}
	b.ReportMetric(float64(reads)/withNeighbours, "reads/rank-k4")
}

// A deep page without Redis seeks through the histogram: every page, at
// any depth, equals the brute-force ranking, and reads no more keys than
// the bound (SeekWithin into its bucket, plus the page, per shard) however
// deep it starts. A page deeper than SeekWithin inside one bucket (a huge
// tie) is refused as Unavailable, reading nothing past the bound.
func TestDeepPagesWithoutRedisSeekThroughTheHistogram(t *testing.T) {
	for _, c := range []struct {
		o  leaderboards.Order
		tb leaderboards.TieBreak
	}{{leaderboards.Desc, leaderboards.Shared}, {leaderboards.Asc, leaderboards.Earliest}} {
		t.Run(string(c.o)+"_"+string(c.tb), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHistBoard(t, c.o, c.tb)
			n := testenv.Scale(3_000, 40_000)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d, %d members", seed, n)
			rng := rand.New(rand.NewPCG(seed, 9))
			scores := make([]leaderboards.Score, n)
			for i := range scores {
				scores[i] = leaderboards.Score{Board: h.d.ID, Period: leaderboards.AllTime, PlayerID: fmt.Sprintf("p%06d", i),
					Score: drawScore(rng), ReachedAt: t0.Add(time.Duration(rng.IntN(5)) * time.Second), Version: 1, UpdatedAt: t0}
			}
			// One run of 1,500 equal scores, deeper than SeekWithin.
			const tied, tiedScore = 1_500, 77_777
			for i := range tied {
				scores[i].Score = tiedScore
			}
			h.put(t, scores)
			h.tally(t, scores)
			want, _ := h.model()
			firstTied := slices.IndexFunc(want, func(e leaderboards.Entry) bool { return e.Score == tiedScore })
			const page = 10
			froms := []int{1, 2, exactTop - page, exactTop - page + 1, exactTop, n - page, n, n + 1}
			for range 60 {
				froms = append(froms, 1+rng.IntN(n))
			}
			served, refused := 0, 0
			for _, from := range froms {
				h.db.items.Store(0)
				got, err := h.scores.Top(ctx, h.d, leaderboards.AllTime, from, page)
				read := h.db.items.Load()
				inTie := from-1 >= firstTied && from-1 < firstTied+tied
				if inTie && from-1-firstTied > dynamo.SeekWithin && from+page-1 > exactTop {
					if !errs.Is(err, errs.Unavailable) {
						t.Fatalf("from %d, %d players into a tie of %d: %v, want Unavailable", from, from-1-firstTied, tied, err)
					}
					refused++
				} else {
					if err != nil {
						t.Fatalf("Top(%d, %d): %v", from, page, err)
					}
					sameEntries(t, fmt.Sprintf("Top(%d, %d)", from, page), got, want[min(from-1, len(want)):min(from-1+page, len(want))])
					served++
				}
				// The bound: the histogram's items, and per shard the
				// keys inside the page's bucket before it plus the page.
				if limit := int64(100 + dynamo.RankShards*(dynamo.SeekWithin+page)); from+page-1 > exactTop && read > limit {
					t.Fatalf("Top(%d, %d) read %d items, more than the bound %d", from, page, read, limit)
				}
			}
			if served < 40 || refused == 0 {
				t.Fatalf("%d pages served, %d refused: the probes did not reach both", served, refused)
			}
			t.Logf("%d pages equal to the model, %d refused inside the tie", served, refused)
		})
	}
}

// Each bucket's run of scores, as BucketScores gives it, is exactly the
// scores Bucket puts in it: its ends are in it, the scores just outside
// are not.
func TestBucketScoresAreTheBucketsRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	for i := range 20_000 {
		s := rng.Int64N(1 << (1 + rng.IntN(53)))
		if i%2 == 1 {
			s = -s
		}
		b := dynamo.Bucket(s)
		lo, hi := dynamo.BucketScores(b)
		if lo > s || s > hi || dynamo.Bucket(lo) != b || dynamo.Bucket(hi) != b {
			t.Fatalf("score %d in bucket %d: BucketScores = %d..%d", s, b, lo, hi)
		}
		if lo > -leaderboards.MaxScore && dynamo.Bucket(lo-1) == b {
			t.Fatalf("bucket %d: %d, below its run %d..%d, is in it too", b, lo-1, lo, hi)
		}
		if hi < leaderboards.MaxScore && dynamo.Bucket(hi+1) == b {
			t.Fatalf("bucket %d: %d, above its run %d..%d, is in it too", b, hi+1, lo, hi)
		}
	}
}

package dynamo

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Histograms. Every board period (and regional view) keeps a histogram of
// its scores in Counters, so that without Redis a player deep in a big
// board is ranked in a bounded number of reads: the members in better
// buckets, plus a place inside the player's own bucket, whose population
// bounds the error. Counting better scores in the index instead costs
// reads in proportion to the rank: millions on a board of ten million.
//
// Buckets are log-scaled, so any distribution of scores fits a bounded
// number of them: a magnitude below 2^(BucketBits+1) is a bucket of its
// own (small scores are exact), a larger one keeps its leading bit and
// the BucketBits bits below it (buckets 1/128 of the magnitude wide). The
// sign mirrors them. Every score up to ±2^53 falls in one of fewer than
// 12,300 buckets, kept in at most 96 items (a group of 128 buckets each,
// one count attribute per bucket), so one Query page reads a whole
// histogram.
//
// The leaderboard processor keeps the histograms from the Scores stream
// (Tally), exactly once: each player counted in a board period has a
// marker holding the score version and the bucket counted, and every
// change moves the marker and the bucket counts in one transaction
// conditioned on the marker as read. A redelivered or older record finds
// the marker at its version or past it and changes nothing. A score that
// leaves the board (deleted, or banned) takes its marker with it, so an
// erased player's id is left nowhere; an unban counts the score again.

// BucketBits is how many bits below the leading one a bucket keeps.
const BucketBits = 7

const (
	exactMagnitudes = 1 << (BucketBits + 1) // magnitudes below this are buckets of their own
	groupSize       = 1 << BucketBits       // buckets per histogram item
	groupOffset     = 100                   // makes every group's sort key non-negative
)

// Defaults of when a rank without Redis is estimated (see Scores).
const (
	DefaultEstimateFrom = 10_000
	DefaultExactTop     = 1_000
)

// Bucket is the histogram bucket of a score. Buckets follow the scores:
// a < b implies Bucket(a) <= Bucket(b), and each holds one run of scores.
func Bucket(score int64) int {
	if score < 0 {
		return -magnitudeBucket(uint64(-score))
	}
	return magnitudeBucket(uint64(score))
}

func magnitudeBucket(v uint64) int {
	if v < exactMagnitudes {
		return int(v)
	}
	shift := bits.Len64(v) - (BucketBits + 1)
	return shift<<BucketBits + int(v>>shift)
}

// BucketScores is the run of scores bucket b holds, lo..hi.
func BucketScores(b int) (lo, hi int64) {
	if b < 0 {
		mlo, mhi := magnitudeScores(-b)
		return -mhi, -mlo
	}
	return magnitudeScores(b)
}

func magnitudeScores(b int) (lo, hi int64) {
	if b < exactMagnitudes {
		return int64(b), int64(b)
	}
	// b is shift<<BucketBits + the magnitude's top BucketBits+1 bits,
	// whose leading one carries into b's bits above BucketBits.
	shift := b>>BucketBits - 1
	top := int64(b - shift<<BucketBits)
	return top << shift, (top+1)<<shift - 1
}

// group and slot place a bucket in the histogram's items (arithmetic
// shifts floor, so negative buckets group too).
func group(b int) int { return b >> BucketBits }
func slot(b int) int  { return b & (groupSize - 1) }

func groupKey(g int) string { return fmt.Sprintf("%03d", g+groupOffset) }
func slotAttr(s int) string { return fmt.Sprintf("b%03d", s) }
func histogramPK(board, period string) string {
	return schema.CountersHistogramPrefix + PeriodKey(board, period)
}

func (s *Scores) histogramKey(board, period string, g int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(histogramPK(board, period)), schema.AttrSK: ddb.S(groupKey(g))}
}

func (s *Scores) markerKey(board, period, player string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(schema.CountersHistogramMarkPrefix + player), schema.AttrSK: ddb.S(PeriodKey(board, period)),
	}
}

// marker is what a board period's histogram counts for one player.
type marker struct {
	Ver    int64 `dynamodbav:"ver"`
	Bucket int   `dynamodbav:"bucket"`
	// Held is an erasure's placeholder (version 0): it counts nothing,
	// and the counting of the score's deletion removes it.
	Held bool `dynamodbav:"held,omitempty"`
}

const attrHeld = "held"

// Histogram is a board period's count of scores per bucket.
type Histogram struct {
	Counts map[int]int64
	Total  int64
}

// Place is where a score stands in the histogram on a board of order o:
// better players are in better buckets, and the score's own bucket holds
// own (the player among them, once the histogram counts them).
func (h Histogram) Place(o leaderboards.Order, score int64) (better, own int64) {
	b := Bucket(score)
	for bb, n := range h.Counts {
		if (o == leaderboards.Asc && bb < b) || (o != leaderboards.Asc && bb > b) {
			better += n
		}
	}
	return better, h.Counts[b]
}

// Seek finds the bucket that holds rank on a board of order o, and how
// many players rank ahead of it in better buckets; found is false past
// the histogram's last.
func (h Histogram) Seek(o leaderboards.Order, rank int64) (bucket int, before int64, found bool) {
	buckets := make([]int, 0, len(h.Counts))
	for b, n := range h.Counts {
		if n > 0 {
			buckets = append(buckets, b)
		}
	}
	slices.Sort(buckets)
	if o != leaderboards.Asc {
		slices.Reverse(buckets)
	}
	for _, b := range buckets {
		if before+h.Counts[b] >= rank {
			return b, before, true
		}
		before += h.Counts[b]
	}
	return 0, before, false
}

// tallyChunk is how many players one histogram transaction moves: each
// a marker and at most two buckets' groups, within the 100 items of a
// transaction.
const tallyChunk = 33

// tallyAttempts bounds the retries of one transaction that lost a race
// (another processor moving the same group, a rebuild).
const tallyAttempts = 16

// Tally applies score changes of one board period (the newest of each
// player's, as the stream brings them) to its histogram, exactly once. A
// Removed score leaves it. Nothing is kept when Counters is not set.
func (s *Scores) Tally(ctx context.Context, board, period string, scores []leaderboards.Score) error {
	if s.Counters == "" {
		return nil
	}
	for chunk := range slices.Chunk(scores, tallyChunk) {
		if err := s.tally(ctx, board, period, chunk); err != nil {
			return err
		}
	}
	return nil
}

func (s *Scores) tally(ctx context.Context, board, period string, scores []leaderboards.Score) error {
	what := fmt.Sprintf("tally the histogram of %s/%s", board, period)
	for attempt := 0; attempt < tallyAttempts; attempt++ {
		if err := ddb.Pause(ctx, attempt); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		counted, err := s.markers(ctx, board, period, scores)
		if err != nil {
			return err
		}
		items, err := s.tallyItems(board, period, scores, counted)
		if err != nil || len(items) == 0 {
			return err
		}
		_, err = s.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return nil
		}
		// A marker moved since it was read (a redelivery racing its first
		// delivery, a recompute) or a group was busy: read again.
		if repeated, raced := cancelled(err); repeated == nil && !raced {
			return unavailable(err, what)
		}
	}
	return unavailable(fmt.Errorf("still racing after %d attempts", tallyAttempts), what)
}

// markers reads the players' markers in a board period, by player.
func (s *Scores) markers(ctx context.Context, board, period string, scores []leaderboards.Score) (map[string]marker, error) {
	keys := make([]map[string]types.AttributeValue, len(scores))
	for i, sc := range scores {
		keys[i] = s.markerKey(board, period, sc.PlayerID)
	}
	raw, err := ddb.BatchGet(ctx, s.DB, s.Counters, keys, true)
	if err != nil {
		return nil, unavailable(err, fmt.Sprintf("read histogram markers of %s/%s", board, period))
	}
	out := make(map[string]marker, len(raw))
	for _, r := range raw {
		var m struct {
			PK string `dynamodbav:"pk"`
			marker
		}
		if err := attributevalue.UnmarshalMap(r, &m); err != nil {
			return nil, fmt.Errorf("decode a histogram marker of %s/%s: %w", board, period, err)
		}
		out[m.PK[len(schema.CountersHistogramMarkPrefix):]] = m.marker
	}
	return out, nil
}

// tallyItems builds the transaction that moves the players whose score
// changed past what their marker counts: each marker written (or deleted)
// under the condition that it is still as read, and the buckets' counts
// moved by the sum of the changes, one update per group.
func (s *Scores) tallyItems(board, period string, scores []leaderboards.Score, counted map[string]marker) ([]types.TransactWriteItem, error) {
	var items []types.TransactWriteItem
	deltas := map[int]int64{}
	for _, sc := range scores {
		m, ok := counted[sc.PlayerID]
		if ok && m.Ver >= sc.Version {
			continue // counted already: a redelivery, or an older record
		}
		if !ok && sc.Removed {
			continue // nothing counted, nothing to take away
		}
		key := s.markerKey(board, period, sc.PlayerID)
		as := expression.Name(schema.AttrPK).AttributeNotExists()
		if ok {
			as = expression.Name(schema.AttrVer).Equal(expression.Value(m.Ver))
			if !m.Held {
				deltas[m.Bucket]--
			}
		}
		cond := ddb.MustBuild(expression.NewBuilder().WithCondition(as))
		if sc.Removed {
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{
				TableName: aws.String(s.Counters), Key: key, ConditionExpression: cond.Condition(),
				ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values(),
			}})
			continue
		}
		b := Bucket(sc.Score)
		deltas[b]++
		key[schema.AttrVer], key[schema.AttrBucket] = ddb.N(sc.Version), ddb.N(int64(b))
		items = append(items, types.TransactWriteItem{Put: ddb.TransactPut(s.Counters, key, cond)})
	}
	groups := map[int]*expression.UpdateBuilder{}
	var order []int
	for b, d := range deltas {
		if d == 0 {
			continue
		}
		g := group(b)
		if groups[g] == nil {
			groups[g] = &expression.UpdateBuilder{}
			order = append(order, g)
		}
		*groups[g] = groups[g].Add(expression.Name(slotAttr(slot(b))), expression.Value(d))
	}
	slices.Sort(order)
	for _, g := range order {
		upd := ddb.MustBuild(expression.NewBuilder().WithUpdate(*groups[g]))
		items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(s.Counters, s.histogramKey(board, period, g), upd)})
	}
	if len(items) > ddb.MaxTransact {
		return nil, fmt.Errorf("tally the histogram of %s/%s: %d transaction items", board, period, len(items))
	}
	return items, nil
}

// Histogram reads a board period's histogram: one Query page (a second
// one only for long board ids whose scores spread over most buckets).
func (s *Scores) Histogram(ctx context.Context, board, period string) (Histogram, error) {
	h := Histogram{Counts: map[int]int64{}}
	if s.Counters == "" {
		return h, nil
	}
	in := ddb.QueryInput(s.Counters, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(histogramPK(board, period))))))
	for {
		out, err := s.DB.Query(ctx, in)
		if err != nil {
			return Histogram{}, unavailable(err, fmt.Sprintf("read the histogram of %s/%s", board, period))
		}
		for _, it := range out.Items {
			if err := h.add(it); err != nil {
				return Histogram{}, fmt.Errorf("histogram of %s/%s: %w", board, period, err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return h, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// add adds one group item's counts.
func (h *Histogram) add(item map[string]types.AttributeValue) error {
	sk, ok := item[schema.AttrSK].(*types.AttributeValueMemberS)
	if !ok {
		return fmt.Errorf("a group item without a sort key")
	}
	g, err := strconv.Atoi(sk.Value)
	if err != nil {
		return fmt.Errorf("group %q: %w", sk.Value, err)
	}
	g -= groupOffset
	for name, v := range item {
		if len(name) != 4 || name[0] != 'b' {
			continue
		}
		sl, err := strconv.Atoi(name[1:])
		n, ok := v.(*types.AttributeValueMemberN)
		if err != nil || !ok {
			return fmt.Errorf("group %q: bad count %s", sk.Value, name)
		}
		c, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("group %q: count %s: %w", sk.Value, name, err)
		}
		if c != 0 {
			h.Counts[g<<BucketBits|sl] += c
			h.Total += c
		}
	}
	return nil
}

// RecomputeHistogram rebuilds a board period's histogram from its scores
// (the disaster-recovery path, a recompute job): every score's marker as
// Tally would have written it, and every bucket's count. It returns how
// many markers and buckets it found wrong and rewrote. It is meant for a
// board at rest: a score that changes while it runs may be left counted
// as it was read, until its next change or the next recompute.
func (s *Scores) RecomputeHistogram(ctx context.Context, board, period string) (rewritten int64, err error) {
	if s.Counters == "" {
		return 0, nil
	}
	want := Histogram{Counts: map[int]int64{}}
	err = s.Scan(ctx, board, period, func(page []leaderboards.Score) error {
		for _, sc := range page {
			want.Counts[Bucket(sc.Score)]++
			want.Total++
		}
		counted, err := s.markers(ctx, board, period, page)
		if err != nil {
			return err
		}
		var puts []types.WriteRequest
		for _, sc := range page {
			if m, ok := counted[sc.PlayerID]; ok && m.Ver == sc.Version && m.Bucket == Bucket(sc.Score) {
				continue
			}
			item := s.markerKey(board, period, sc.PlayerID)
			item[schema.AttrVer], item[schema.AttrBucket] = ddb.N(sc.Version), ddb.N(int64(Bucket(sc.Score)))
			puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
		if err := ddb.BatchWrite(ctx, s.DB, s.Counters, puts); err != nil {
			return unavailable(err, fmt.Sprintf("rewrite histogram markers of %s/%s", board, period))
		}
		rewritten += int64(len(puts))
		return nil
	})
	if err != nil {
		return 0, err
	}
	have, err := s.Histogram(ctx, board, period)
	if err != nil {
		return 0, err
	}
	groups := map[int]bool{}
	for b, n := range want.Counts {
		if have.Counts[b] != n {
			rewritten++
			groups[group(b)] = true
		}
	}
	for b, n := range have.Counts {
		if _, ok := want.Counts[b]; !ok && n != 0 {
			rewritten++
			groups[group(b)] = true
		}
	}
	if err := s.putGroups(ctx, board, period, want, groups); err != nil {
		return 0, err
	}
	return rewritten, nil
}

// putGroups writes the histogram's groups named from want, whole (a group
// left empty is deleted).
func (s *Scores) putGroups(ctx context.Context, board, period string, want Histogram, groups map[int]bool) error {
	var writes []types.WriteRequest
	for g := range groups {
		item := s.histogramKey(board, period, g)
		for sl := range groupSize {
			if n := want.Counts[g<<BucketBits|sl]; n != 0 {
				item[slotAttr(sl)] = ddb.N(n)
			}
		}
		if len(item) == 2 {
			writes = append(writes, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: item}})
		} else {
			writes = append(writes, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
	}
	if err := ddb.BatchWrite(ctx, s.DB, s.Counters, writes); err != nil {
		return unavailable(err, fmt.Sprintf("rewrite the histogram of %s/%s", board, period))
	}
	return nil
}

// HistogramTotal is how many scores a board period's histogram counts;
// kept is false when no histograms are kept.
func (s *Scores) HistogramTotal(ctx context.Context, board, period string) (total int64, kept bool, err error) {
	if s.Counters == "" {
		return 0, false, nil
	}
	h, err := s.Histogram(ctx, board, period)
	return h.Total, true, err
}

package dynamo

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/errs"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Get returns the scores of the given players in the period, in the order
// asked, without the ones that have none. The first player's is read
// strongly consistent, so a player ranked among friends sees their own
// latest score; the others' eventually consistent, at half the reads.
func (s *Scores) Get(ctx context.Context, board, period string, players []string) ([]leaderboards.Score, error) {
	var keys []map[string]types.AttributeValue
	seen := map[string]bool{}
	for _, p := range players {
		if !seen[p] && !strings.HasPrefix(p, "#") {
			seen[p] = true
			keys = append(keys, s.key(board, period, p))
		}
	}
	var own, others []map[string]types.AttributeValue
	g, gctx := errgroup.WithContext(ctx)
	if len(keys) > 0 {
		g.Go(func() (err error) { own, err = ddb.BatchGet(gctx, s.DB, s.Table, keys[:1], true); return })
	}
	if len(keys) > 1 {
		g.Go(func() (err error) { others, err = ddb.BatchGet(gctx, s.DB, s.Table, keys[1:], false); return })
	}
	if err := g.Wait(); err != nil {
		return nil, unavailable(err, fmt.Sprintf("read scores %s/%s", board, period))
	}
	raw := append(own, others...)
	found := make(map[string]leaderboards.Score, len(raw))
	for _, r := range raw {
		var it scoreItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, fmt.Errorf("decode score %s/%s: %w", board, period, err)
		}
		if !it.Banned {
			found[it.PlayerID] = it.score()
		}
	}
	out := make([]leaderboards.Score, 0, len(found))
	for _, p := range players {
		if sc, ok := found[p]; ok {
			out = append(out, sc)
			delete(found, p)
		}
	}
	return out, nil
}

// Members is the number of players with a score in the period.
func (s *Scores) Members(ctx context.Context, board, period string) (int64, error) {
	members := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(schema.AttrMembers))))
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(board, period, MetaID),
		ProjectionExpression: members.Projection(), ExpressionAttributeNames: members.Names(),
	})
	if err != nil {
		return 0, unavailable(err, fmt.Sprintf("count members %s/%s", board, period))
	}
	var meta struct {
		Members int64 `dynamodbav:"members"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &meta); err != nil {
		return 0, fmt.Errorf("decode members %s/%s: %w", board, period, err)
	}
	return meta.Members, nil
}

// Views lists the regions with a view in a regional board's period: every
// region a score of the period was ever applied in (a view a move emptied
// stays listed; it is simply empty).
func (s *Scores) Views(ctx context.Context, board, period string) ([]string, error) {
	views := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(schema.AttrViews))))
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table), Key: s.key(board, period, MetaID), ConsistentRead: aws.Bool(true),
		ProjectionExpression: views.Projection(), ExpressionAttributeNames: views.Names(),
	})
	if err != nil {
		return nil, unavailable(err, fmt.Sprintf("list views %s/%s", board, period))
	}
	var meta struct {
		Views []string `dynamodbav:"views,stringset"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &meta); err != nil {
		return nil, fmt.Errorf("decode views %s/%s: %w", board, period, err)
	}
	slices.Sort(meta.Views)
	return meta.Views, nil
}

// AddViews lists regions as having a view in a regional board's period (a
// recompute, from the scores' own regions).
func (s *Scores) AddViews(ctx context.Context, board, period string, regions []string) error {
	if len(regions) == 0 {
		return nil
	}
	upd := expression.Add(expression.Name(schema.AttrViews), expression.Value(&types.AttributeValueMemberSS{Value: regions}))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(board, period, MetaID), ddb.MustBuild(expression.NewBuilder().WithUpdate(upd))))
	if err != nil {
		return unavailable(err, fmt.Sprintf("add views %s/%s", board, period))
	}
	return nil
}

// Scan calls fn with every score of the period, a page at a time, with
// strongly consistent reads (a rebuild must not miss a write it raced).
func (s *Scores) Scan(ctx context.Context, board, period string, fn func([]leaderboards.Score) error) error {
	after := ""
	for {
		page, next, err := s.ScanPage(ctx, board, period, after)
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		after = next
	}
}

// ScanPage reads one page of the period's scores (up to 1 MB), strongly
// consistent, after the player after ("" from the start); next is the
// position to continue from, "" after the last page.
func (s *Scores) ScanPage(ctx context.Context, board, period, after string) (page []leaderboards.Score, next string, err error) {
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(PeriodKey(board, period))))))
	in.ConsistentRead = aws.Bool(true)
	if after != "" {
		in.ExclusiveStartKey = s.key(board, period, after)
	}
	out, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", unavailable(err, fmt.Sprintf("scan scores %s/%s", board, period))
	}
	page = make([]leaderboards.Score, 0, len(out.Items))
	for _, r := range out.Items {
		var it scoreItem
		if err := attributevalue.UnmarshalMap(r, &it); err != nil {
			return nil, "", fmt.Errorf("decode score %s/%s: %w", board, period, err)
		}
		if it.PlayerID != MetaID && !it.Banned {
			page = append(page, it.score())
		}
	}
	if last, ok := out.LastEvaluatedKey[schema.AttrPlayerID].(*types.AttributeValueMemberS); ok {
		next = last.Value
	}
	return page, next, nil
}

// CountScores counts the period's scores from the items themselves (not
// the meta item's member count, which it checks).
func (s *Scores) CountScores(ctx context.Context, board, period string) (int64, error) {
	// Banned scores are out of the member count.
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(PeriodKey(board, period)))).
		WithFilter(expression.Name(schema.AttrBanned).AttributeNotExists())))
	in.Select = types.SelectCount
	in.ConsistentRead = aws.Bool(true)
	var n int64
	p := dynamodb.NewQueryPaginator(s.DB, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return 0, unavailable(err, fmt.Sprintf("count scores %s/%s", board, period))
		}
		n += int64(out.Count)
	}
	meta, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: s.key(board, period, MetaID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, unavailable(err, fmt.Sprintf("count scores %s/%s", board, period))
	}
	if len(meta.Item) > 0 {
		n-- // the meta item
	}
	return n, nil
}

// SetMembers writes the period's member count (a recompute).
func (s *Scores) SetMembers(ctx context.Context, board, period string, n int64) error {
	upd := expression.Set(expression.Name(schema.AttrMembers), expression.Value(n))
	_, err := s.DB.UpdateItem(ctx, ddb.UpdateInput(s.Table, s.key(board, period, MetaID), ddb.MustBuild(expression.NewBuilder().WithUpdate(upd))))
	if err != nil {
		return unavailable(err, fmt.Sprintf("set members %s/%s", board, period))
	}
	return nil
}

// SeekWithin bounds a deep page read without Redis: how many keys of
// each index shard it reads inside the histogram bucket the page starts
// in, before the page itself.
const SeekWithin = 1000

// Top returns n entries of the period from rank from on, from the by_score
// index. A page that ends within the top ExactTop reads the first
// from-1+n keys of every shard, which hold the board's first from-1+n,
// and ranks them exactly. A deeper page seeks: the histogram counts the
// players in better buckets, and each shard is read from the start of the
// bucket that holds rank from, at most SeekWithin keys into it plus the
// page; the ranks are as exact as the histogram (the leaderboard
// processor keeps it a moment behind the table). A page that starts
// deeper than SeekWithin inside one bucket, or on a histogram being
// rebuilt, is Unavailable: a retry finds Redis serving it again.
func (s *Scores) Top(ctx context.Context, d leaderboards.Definition, period string, from, n int) ([]leaderboards.Entry, error) {
	if n <= 0 || from < 1 {
		return []leaderboards.Entry{}, nil
	}
	if int64(from-1+n) <= cmp.Or(max(s.ExactTop, 0), DefaultExactTop) {
		keys, err := s.nearest(ctx, d.ID, period, "", true, from-1+n)
		if err != nil {
			return nil, err
		}
		entries, err := decodeKeys(d.Order, keys)
		if err != nil {
			return nil, err
		}
		leaderboards.Rank(d.Order, d.TieBreak, entries, 0, 0)
		return entries[min(from-1, len(entries)):], nil
	}
	var hist Histogram
	var members int64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { hist, err = s.Histogram(gctx, d.ID, period); return })
	g.Go(func() (err error) { members, err = s.Members(gctx, d.ID, period); return })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if drift := members - hist.Total; hist.Total == 0 || drift > members/10 || -drift > members/10 {
		return nil, errs.New(errs.Unavailable, "rank %d of %s/%s cannot be reached without the cache while the board's histogram is rebuilt; retry shortly", from, d.ID, period)
	}
	b, before, found := hist.Seek(d.Order, int64(from))
	if !found {
		return []leaderboards.Entry{}, nil
	}
	skip := from - 1 - int(before)
	if skip > SeekWithin {
		return nil, errs.New(errs.Unavailable, "rank %d of %s/%s lies %d players into a run of close scores; without the cache a page that deep in it is not served; retry shortly", from, d.ID, period, skip)
	}
	best, _ := BucketScores(b)
	if d.Order != leaderboards.Asc {
		_, best = BucketScores(b)
	}
	keys, err := s.nearest(ctx, d.ID, period, scorePart(d.Order, best), true, skip+n)
	if err != nil {
		return nil, err
	}
	entries, err := decodeKeys(d.Order, keys)
	if err != nil {
		return nil, err
	}
	// Every score in a better bucket is strictly better.
	leaderboards.Rank(d.Order, d.TieBreak, entries, int(before), int(before))
	return entries[min(skip, len(entries)):], nil
}

// Around returns the player's entry, up to k entries on each side and
// the period's size. Counted exactly, the rank is one more than the number
// of keys before the player's; under Shared the window's first entry is
// ranked by the number of strictly better scores, counted the same way
// against its score's key prefix. Counting costs reads in proportion to
// the rank, so on a board of EstimateFrom members or more the rank is
// estimated from the histogram (see estimate) unless the histogram puts
// the player within the top ExactTop; the neighbours then take their
// ranks from the player's.
func (s *Scores) Around(ctx context.Context, d leaderboards.Definition, period, player string, k int) (leaderboards.Placement, error) {
	var cur *leaderboards.Score
	var total int64
	var hist Histogram
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { cur, err = s.read(gctx, d.ID, period, player); return })
	g.Go(func() (err error) { total, err = s.Members(gctx, d.ID, period); return })
	g.Go(func() (err error) { hist, err = s.Histogram(gctx, d.ID, period); return })
	if err := g.Wait(); err != nil {
		return leaderboards.Placement{}, err
	}
	if cur == nil {
		return leaderboards.Placement{}, leaderboards.ErrNotRanked
	}
	key := RankKey(d.Order, cur.Score, cur.ReachedAt, player)
	own := scorePart(d.Order, cur.Score)
	est, approximate := s.estimate(d.Order, hist, total, cur.Score)
	var ahead, betterThanOwn int64
	var before, after []string
	g, gctx = errgroup.WithContext(ctx)
	if !approximate {
		g.Go(func() (err error) { ahead, err = s.countBefore(gctx, d.ID, period, key); return })
		if d.TieBreak == leaderboards.Shared {
			g.Go(func() (err error) { betterThanOwn, err = s.countBefore(gctx, d.ID, period, own); return })
		}
	}
	if k > 0 {
		g.Go(func() (err error) { before, err = s.nearest(gctx, d.ID, period, key, false, k); return })
		g.Go(func() (err error) { after, err = s.nearest(gctx, d.ID, period, key, true, k); return })
	}
	if err := g.Wait(); err != nil {
		return leaderboards.Placement{}, err
	}
	if approximate {
		ahead, betterThanOwn = est.rank-1, est.rank-1
	}
	// The index trails the table a little: drop a stale key of the player,
	// whose current score comes from the table.
	keys := make([]string, 0, len(before)+1+len(after))
	for _, group := range [][]string{before, {key}, after} {
		for _, kk := range group {
			if kk == key || !strings.HasSuffix(kk, "#"+player) {
				keys = append(keys, kk)
			}
		}
	}
	window, err := decodeKeys(d.Order, keys)
	if err != nil {
		return leaderboards.Placement{}, err
	}
	first := slices.Index(keys, key)
	offset := int(ahead) - first
	better := betterThanOwn
	if d.TieBreak == leaderboards.Shared && window[0].Score != cur.Score {
		if approximate {
			// The first entry of the player's score takes the estimate.
			tied := slices.IndexFunc(window, func(e leaderboards.Entry) bool { return e.Score == cur.Score })
			offset = int(est.rank-1) - tied
			better = int64(offset)
		} else if better, err = s.countBefore(ctx, d.ID, period, scorePart(d.Order, window[0].Score)); err != nil {
			return leaderboards.Placement{}, err
		}
	}
	leaderboards.Rank(d.Order, d.TieBreak, window, offset, int(better))
	for _, e := range window {
		if e.PlayerID == player {
			return leaderboards.Placement{Self: e, Window: window, Total: total, Approximate: approximate, RankError: est.err}, nil
		}
	}
	return leaderboards.Placement{}, fmt.Errorf("rank %s/%s/%s: the player fell out of their own window", d.ID, period, player)
}

// estimated is a rank read from a histogram: the true rank lies within
// rank ± err.
type estimated struct{ rank, err int64 }

// estimate places a score on a board of order o from its histogram h, if
// the board is big enough (members, by its member count) and the player
// not within the top. The players in better buckets rank ahead; the
// player is somewhere among their own bucket's, so the estimate is the
// middle of that run, and its bound half the bucket. A histogram that
// counts more or fewer players than the board holds (changes the stream
// has not brought yet) widens the bound by the difference; one far off
// (being rebuilt) is not used.
func (s *Scores) estimate(o leaderboards.Order, h Histogram, members, score int64) (estimated, bool) {
	from, top := s.EstimateFrom, s.ExactTop
	if from <= 0 {
		from = DefaultEstimateFrom
	}
	if top <= 0 {
		top = DefaultExactTop
	}
	drift := members - h.Total
	if drift < 0 {
		drift = -drift
	}
	if members < from || h.Total < from || drift > members/10 {
		return estimated{}, false
	}
	better, own := h.Place(o, score)
	lo, hi := max(1, better+1-drift), better+max(own, 1)+drift
	if hi <= top {
		return estimated{}, false
	}
	rank := (lo + hi) / 2
	return estimated{rank: rank, err: hi - rank}, true
}

func decodeKeys(o leaderboards.Order, keys []string) ([]leaderboards.Entry, error) {
	entries := make([]leaderboards.Entry, 0, len(keys))
	for _, k := range keys {
		e, err := entryOfKey(o, k)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// eachShard runs fn for every shard of the period's index concurrently.
func eachShard(ctx context.Context, fn func(ctx context.Context, shard int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for shard := range RankShards {
		g.Go(func() error { return fn(gctx, shard) })
	}
	return g.Wait()
}

// countBefore counts the keys of the period that sort before bound.
func (s *Scores) countBefore(ctx context.Context, board, period, bound string) (int64, error) {
	var counts [RankShards]int64
	err := eachShard(ctx, func(ctx context.Context, shard int) error {
		in := s.indexQuery(board, period, shard, rankBefore, bound)
		in.Select = types.SelectCount
		for {
			out, err := s.DB.Query(ctx, in)
			if err != nil {
				return unavailable(err, fmt.Sprintf("count ranks %s/%s", board, period))
			}
			counts[shard] += int64(out.Count)
			if len(out.LastEvaluatedKey) == 0 {
				return nil
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	})
	var total int64
	for _, c := range counts {
		total += c
	}
	return total, err
}

// nearest returns, in rank order, the n keys closest to from on one side:
// after it (forward; from "" means from the top) or before it.
func (s *Scores) nearest(ctx context.Context, board, period, from string, forward bool, n int) ([]string, error) {
	var found [RankShards][]string
	err := eachShard(ctx, func(ctx context.Context, shard int) error {
		side := rankAfter
		if !forward {
			side = rankBefore
		}
		in := s.indexQuery(board, period, shard, side, from)
		in.ScanIndexForward = aws.Bool(forward)
		for len(found[shard]) < n {
			in.Limit = aws.Int32(int32(n - len(found[shard])))
			out, err := s.DB.Query(ctx, in)
			if err != nil {
				return unavailable(err, fmt.Sprintf("read ranks %s/%s", board, period))
			}
			for _, item := range out.Items {
				if v, ok := item[schema.AttrRankSK].(*types.AttributeValueMemberS); ok {
					found[shard] = append(found[shard], v.Value)
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, f := range found {
		keys = append(keys, f...)
	}
	slices.Sort(keys)
	if len(keys) > n {
		if forward {
			keys = keys[:n]
		} else {
			keys = keys[len(keys)-n:]
		}
	}
	return keys, nil
}

// rankBefore and rankAfter bound a by_score query to the keys on one side
// of a rank key.
var (
	rankBefore = expression.Key(schema.AttrRankSK).LessThan
	rankAfter  = expression.Key(schema.AttrRankSK).GreaterThan
)

// indexQuery is a query of one by_score shard, bounded by side against
// bound (unbounded when bound is empty).
func (s *Scores) indexQuery(board, period string, shard int, side func(expression.ValueBuilder) expression.KeyConditionBuilder, bound string) *dynamodb.QueryInput {
	cond := expression.Key(schema.AttrRankPK).Equal(expression.Value(RankPartition(board, period, shard)))
	if bound != "" {
		cond = cond.And(side(expression.Value(bound)))
	}
	in := ddb.QueryInput(s.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(cond)))
	in.IndexName = aws.String(schema.IndexScoresByScore)
	return in
}

// After returns, in rank order, up to n entries of the period that rank
// after the entry e (from the top when e is nil), unranked, read from
// the by_score index: a close walks the final order with it.
func (s *Scores) After(ctx context.Context, d leaderboards.Definition, period string, e *leaderboards.Entry, n int) ([]leaderboards.Entry, error) {
	from := ""
	if e != nil {
		from = RankKey(d.Order, e.Score, e.ReachedAt, e.PlayerID)
	}
	keys, err := s.nearest(ctx, d.ID, period, from, true, n)
	if err != nil {
		return nil, err
	}
	return decodeKeys(d.Order, keys)
}

package dynamo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/leaderboards"
	"github.com/rallyhq/rally/shared/schema"
)

// Archives stores the final standings of closed board periods in the
// Archives table (see schema.Archives): a head, the pages of the final
// order, and a pointer per page keyed by the rank key of its first entry.
type Archives struct {
	DB    ddb.DB
	Table string
}

var _ leaderboards.Archive = (*Archives)(nil)

type archivedEntry struct {
	Rank      int    `dynamodbav:"r"`
	PlayerID  string `dynamodbav:"p"`
	Score     int64  `dynamodbav:"s"`
	ReachedAt int64  `dynamodbav:"t"`
}

type pageItem struct {
	PK      string          `dynamodbav:"pk"`
	SK      string          `dynamodbav:"sk"`
	Entries []archivedEntry `dynamodbav:"entries"`
}

type pointerItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	Page int    `dynamodbav:"page"`
}

type headItem struct {
	PK    string `dynamodbav:"pk"`
	SK    string `dynamodbav:"sk"`
	Total int64  `dynamodbav:"total"`
	Pages int    `dynamodbav:"pages"`
	// PartPages is absent from heads written before parts were told.
	PartPages int    `dynamodbav:"part_pages,omitempty"`
	ClosedAt  string `dynamodbav:"closed_at"`
}

func pageSK(n int) string { return fmt.Sprintf("%s%09d", schema.ArchivePagePrefix, n) }

func (a *Archives) key(board, period, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPK: ddb.S(PeriodKey(board, period)), schema.AttrSK: ddb.S(sk)}
}

func archiveUnavailable(err error, what string) error {
	return unavailable(err, "archive: "+what)
}

// Head reads a board period's archive head; found is false until its
// close finished.
func (a *Archives) Head(ctx context.Context, board, period string) (leaderboards.ArchiveHead, bool, error) {
	out, err := a.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(a.Table), Key: a.key(board, period, schema.ArchiveHeadSK)})
	if err != nil {
		return leaderboards.ArchiveHead{}, false, archiveUnavailable(err, fmt.Sprintf("read head %s/%s", board, period))
	}
	if len(out.Item) == 0 {
		return leaderboards.ArchiveHead{}, false, nil
	}
	var it headItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return leaderboards.ArchiveHead{}, false, fmt.Errorf("decode archive head %s/%s: %w", board, period, err)
	}
	return leaderboards.ArchiveHead{Total: it.Total, Pages: it.Pages, PartPages: it.PartPages, ClosedAt: ddb.ParseTime(it.ClosedAt)}, true, nil
}

// PutPages writes pages of the final order, the first numbered first,
// with their pointers. Writing a page again writes the same item, so a
// close resumed from its checkpoint may.
func (a *Archives) PutPages(ctx context.Context, d leaderboards.Definition, period string, first int, pages [][]leaderboards.Entry) error {
	var reqs []types.WriteRequest
	for i, page := range pages {
		if len(page) == 0 {
			continue
		}
		n := first + i
		it := pageItem{PK: PeriodKey(d.ID, period), SK: pageSK(n), Entries: make([]archivedEntry, len(page))}
		for j, e := range page {
			it.Entries[j] = archivedEntry{Rank: e.Rank, PlayerID: e.PlayerID, Score: e.Score, ReachedAt: e.ReachedAt.UnixMilli()}
		}
		e := page[0]
		ptr := pointerItem{PK: it.PK, SK: schema.ArchiveKeyPrefix + RankKey(d.Order, e.Score, e.ReachedAt, e.PlayerID), Page: n}
		for _, v := range []any{it, ptr} {
			av, err := attributevalue.MarshalMap(v)
			if err != nil {
				return fmt.Errorf("encode archive page %s/%s/%d: %w", d.ID, period, n, err)
			}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
		}
	}
	if err := ddb.BatchWriteAll(ctx, a.DB, a.Table, reqs); err != nil {
		return archiveUnavailable(err, fmt.Sprintf("write pages %s/%s from %d", d.ID, period, first))
	}
	return nil
}

// PutHead writes the head once: a close repeated after it finished
// writes nothing (created is false).
func (a *Archives) PutHead(ctx context.Context, board, period string, h leaderboards.ArchiveHead) (created bool, err error) {
	av, err := attributevalue.MarshalMap(headItem{PK: PeriodKey(board, period), SK: schema.ArchiveHeadSK, Total: h.Total, Pages: h.Pages, PartPages: h.PartPages, ClosedAt: ddb.FormatTime(h.ClosedAt)})
	if err != nil {
		return false, fmt.Errorf("encode archive head %s/%s: %w", board, period, err)
	}
	absent := expression.Name(schema.AttrPK).AttributeNotExists()
	_, err = a.DB.PutItem(ctx, ddb.PutInput(a.Table, av, ddb.MustBuild(expression.NewBuilder().WithCondition(absent))))
	if ddb.IsConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, archiveUnavailable(err, fmt.Sprintf("write head %s/%s", board, period))
	}
	return true, nil
}

// Page reads page n of the final order (0-based); empty past the last.
func (a *Archives) Page(ctx context.Context, board, period string, n int) ([]leaderboards.Entry, error) {
	out, err := a.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(a.Table), Key: a.key(board, period, pageSK(n))})
	if err != nil {
		return nil, archiveUnavailable(err, fmt.Sprintf("read page %s/%s/%d", board, period, n))
	}
	var it pageItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fmt.Errorf("decode archive page %s/%s/%d: %w", board, period, n, err)
	}
	entries := make([]leaderboards.Entry, len(it.Entries))
	for i, e := range it.Entries {
		entries[i] = leaderboards.Entry{Rank: e.Rank, PlayerID: e.PlayerID, Score: e.Score, ReachedAt: time.UnixMilli(e.ReachedAt).UTC()}
	}
	return entries, nil
}

// PageOf finds the page that would hold score s in d's archived period:
// the page whose first entry is the last to rank at or before it. found
// is false when s ranks before every page (or there are none).
func (a *Archives) PageOf(ctx context.Context, d leaderboards.Definition, period string, s leaderboards.Score) (int, bool, error) {
	bound := schema.ArchiveKeyPrefix + RankKey(d.Order, s.Score, s.ReachedAt, s.PlayerID)
	cond := expression.Key(schema.AttrPK).Equal(expression.Value(PeriodKey(d.ID, period))).
		And(expression.Key(schema.AttrSK).Between(expression.Value(schema.ArchiveKeyPrefix), expression.Value(bound)))
	in := ddb.QueryInput(a.Table, ddb.MustBuild(expression.NewBuilder().WithKeyCondition(cond)))
	in.ScanIndexForward, in.Limit = aws.Bool(false), aws.Int32(1)
	out, err := a.DB.Query(ctx, in)
	if err != nil {
		return 0, false, archiveUnavailable(err, fmt.Sprintf("find page %s/%s", d.ID, period))
	}
	if len(out.Items) == 0 {
		return 0, false, nil
	}
	var it pointerItem
	if err := attributevalue.UnmarshalMap(out.Items[0], &it); err != nil {
		return 0, false, fmt.Errorf("decode archive pointer %s/%s: %w", d.ID, period, err)
	}
	return it.Page, true, nil
}

// Strike takes the player of score s out of page n of d's archived
// period (an erasure after the close): the others keep the ranks they
// closed with. When the player opened the page, its pointer is keyed
// again by the entry that opens it now, so no key names them; a strike
// cut short between the two is finished by the next. It says whether the
// player was there.
func (a *Archives) Strike(ctx context.Context, d leaderboards.Definition, period string, n int, s leaderboards.Score) (bool, error) {
	player := s.PlayerID
	for attempt := 0; ; attempt++ {
		entries, err := a.Page(ctx, d.ID, period, n)
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(entries, func(e leaderboards.Entry) bool { return e.PlayerID == player })
		if i < 0 {
			// Struck before: the pointer may still carry their key.
			return false, a.repoint(ctx, d, period, n, s, entries)
		}
		// The entry is removed by its index, guarded by the player still
		// being there (a neighbour struck meanwhile moves it).
		at := fmt.Sprintf("%s[%d]", schema.AttrEntries, i)
		upd := ddb.MustBuild(expression.NewBuilder().
			WithUpdate(expression.Remove(expression.Name(at))).
			WithCondition(expression.Name(at + ".p").Equal(expression.Value(player))))
		_, err = a.DB.UpdateItem(ctx, ddb.UpdateInput(a.Table, a.key(d.ID, period, pageSK(n)), upd))
		if ddb.IsConditionFailed(err) && attempt < 10 {
			continue
		}
		if err != nil {
			return false, archiveUnavailable(err, fmt.Sprintf("strike %s/%s/%d", d.ID, period, n))
		}
		if i == 0 {
			// The pointer is the player's: they opened the page.
			return true, a.rekey(ctx, d, period, n, s, entries[1:])
		}
		return true, nil
	}
}

// repoint finishes a strike cut short: when page n's pointer is still
// keyed by the struck score s, it is keyed again (see rekey).
func (a *Archives) repoint(ctx context.Context, d leaderboards.Definition, period string, n int, s leaderboards.Score, rest []leaderboards.Entry) error {
	struck := schema.ArchiveKeyPrefix + RankKey(d.Order, s.Score, s.ReachedAt, s.PlayerID)
	out, err := a.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(a.Table), Key: a.key(d.ID, period, struck)})
	if err != nil {
		return archiveUnavailable(err, fmt.Sprintf("repoint %s/%s/%d", d.ID, period, n))
	}
	if len(out.Item) == 0 {
		return nil
	}
	return a.rekey(ctx, d, period, n, s, rest)
}

// rekey keys page n's pointer, keyed by the struck score s, by the entry
// that opens the page now (rest[0]): a pointer put for the new opener,
// then the struck one deleted.
func (a *Archives) rekey(ctx context.Context, d leaderboards.Definition, period string, n int, s leaderboards.Score, rest []leaderboards.Entry) error {
	struck := schema.ArchiveKeyPrefix + RankKey(d.Order, s.Score, s.ReachedAt, s.PlayerID)
	if len(rest) > 0 {
		e := rest[0]
		av, err := attributevalue.MarshalMap(pointerItem{PK: PeriodKey(d.ID, period), SK: schema.ArchiveKeyPrefix + RankKey(d.Order, e.Score, e.ReachedAt, e.PlayerID), Page: n})
		if err != nil {
			return err
		}
		if _, err := a.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.Table), Item: av}); err != nil {
			return archiveUnavailable(err, fmt.Sprintf("repoint %s/%s/%d", d.ID, period, n))
		}
	}
	if _, err := a.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(a.Table), Key: a.key(d.ID, period, struck)}); err != nil {
		return archiveUnavailable(err, fmt.Sprintf("repoint %s/%s/%d", d.ID, period, n))
	}
	return nil
}

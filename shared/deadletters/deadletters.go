// Package deadletters keeps the batches stream processors parked, with
// their records, in the DeadLetters table. A DynamoDB stream keeps records
// for 24 hours, and the on-failure destination of an event source mapping
// receives only where a parked batch was (shard, sequence range), so the
// records are read from the stream and archived here the moment a batch is
// parked; a redrive replays them from here, whenever it comes.
package deadletters

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// Batch is one parked batch.
type Batch struct {
	// ID identifies the batch: the same function, shard and sequence
	// range always give the same ID, so archiving it twice (a redelivered
	// on-failure message) keeps one copy.
	ID       string `json:"id"`
	Function string `json:"function"`
	// Source is the logical name of the table whose stream it came from.
	Source    string `json:"source"`
	StreamARN string `json:"stream_arn"`
	ShardID   string `json:"shard_id"`
	First     string `json:"first_sequence_number"`
	Last      string `json:"last_sequence_number"`
	Size      int    `json:"records"`
	// Reason is why it was parked: RetryAttemptsExhausted or
	// MaximumRecordAgeExceeded, as Lambda names it.
	Reason string `json:"reason"`
	// Error is the last failure, when known.
	Error      string    `json:"error,omitempty"`
	ParkedAt   time.Time `json:"parked_at"`
	ArchivedAt time.Time `json:"archived_at"`
	// Attempts counts the redrives that did not apply the whole batch.
	Attempts int `json:"redrive_attempts"`
	// Expires is when the archive lets the batch go (Retention after it
	// was first archived; what a partial redrive or an erasure leaves of
	// it keeps the date).
	Expires time.Time `json:"expires_at,omitzero"`
}

// BatchID is the ID of the batch of function from first to last in shard.
func BatchID(function, shard, first, last string) string {
	sum := sha256.Sum256([]byte(function + "\x00" + shard + "\x00" + first + "\x00" + last))
	return hex.EncodeToString(sum[:12])
}

// Retention is how long an archived batch is kept when nobody redrives it.
const Retention = 30 * 24 * time.Hour

// chunkBytes bounds one chunk of compressed records, well under
// DynamoDB's 400 KB item size.
const chunkBytes = 300 << 10

// ErrNotFound means no batch of that function has that ID.
var ErrNotFound = errors.New("deadletters: no such parked batch")

// Archive is the DeadLetters table.
type Archive struct {
	DB    ddb.DB
	Table string
	Clock clock.Clock
	// UserKeys key the index of the users each batch's records name (the
	// erasure's keyed hashes of a user id, under the key's current version
	// first, then its previous one): an erasure finds the batches holding
	// a user's records without reading the others, and the index names
	// nobody. A batch is indexed under the first; an erasure looks under
	// each. Nil writes no index (a test's archive).
	UserKeys func(ctx context.Context, user string) []string
	// Erasures tells which users are erased or being erased: their
	// records are not archived once the erasure completed, and not
	// redriven (see keep). Nil filters nothing.
	Erasures Erasures
}

// Item kinds, by pk prefix.
const (
	summaryPrefix = "dlq#"
	chunkPrefix   = "batch#"
	userPrefix    = "user#"
)

type summaryItem struct {
	PK      string `dynamodbav:"pk"`
	SK      string `dynamodbav:"sk"`
	Batch   string `dynamodbav:"batch"` // the Batch as JSON
	Chunks  int    `dynamodbav:"chunks"`
	Expires int64  `dynamodbav:"expires_at"`
	// Users are the keyed hashes of the users the records name (the
	// index items to delete with the batch).
	Users []string `dynamodbav:"users,stringset,omitempty"`
	// LeaseUntil and LeaseOwner hold the batch for one redrive or
	// erasure at a time.
	LeaseUntil string `dynamodbav:"lease_until,omitempty"`
	LeaseOwner string `dynamodbav:"lease_owner,omitempty"`
}

type chunkItem struct {
	PK      string `dynamodbav:"pk"`
	SK      string `dynamodbav:"sk"`
	Data    []byte `dynamodbav:"data"`
	Expires int64  `dynamodbav:"expires_at"`
}

func summaryKey(function string, archivedAt time.Time, id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: ddb.S(summaryPrefix + function),
		schema.AttrSK: ddb.S(ddb.FormatTime(archivedAt) + "#" + id),
	}
}

func chunkSK(i int) string { return fmt.Sprintf("%06d", i) }

// Put archives b with its records. The index of the users the records
// name is written first, then the records, then the summary, so a listed
// batch always has its records and an erasure always finds a batch
// naming its user (an index item whose batch has no summary yet is one
// being archived). Records of a user whose erasure completed after they
// were written are left out: a batch parked late must not bring an
// erased user back. Archiving a batch already archived (same ID) changes
// nothing.
func (a *Archive) Put(ctx context.Context, b Batch, records []events.DynamoDBEventRecord) (Batch, error) {
	if b.ID == "" {
		b.ID = BatchID(b.Function, b.ShardID, b.First, b.Last)
	}
	if existing, err := a.Get(ctx, b.Function, b.ID); err == nil {
		return existing, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Batch{}, err
	}
	now := clock.Now(a.Clock)
	if b.ArchivedAt.IsZero() {
		b.ArchivedAt = now
	}
	if b.Expires.IsZero() {
		b.Expires = now.Add(Retention)
	}
	expires := b.Expires.Unix()
	users, err := a.index(ctx, b, records, expires)
	if err != nil {
		return Batch{}, err
	}
	// Read after the index is written: an erasure completing after this
	// read found the index.
	records, err = a.keep(ctx, records, false)
	if err != nil {
		return Batch{}, err
	}
	if len(records) == 0 {
		// Every record was an erased user's: nothing to archive.
		return b, a.forgetUsers(ctx, b, users)
	}
	b.Size = len(records)
	chunks, err := pack(records)
	if err != nil {
		return Batch{}, fmt.Errorf("deadletters: pack %s of %s: %w", b.ID, b.Function, err)
	}
	reqs := make([]types.WriteRequest, len(chunks))
	for i, c := range chunks {
		item, err := attributevalue.MarshalMap(chunkItem{PK: chunkPrefix + b.ID, SK: chunkSK(i), Data: c, Expires: expires})
		if err != nil {
			return Batch{}, fmt.Errorf("deadletters: encode chunk: %w", err)
		}
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: item}}
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return Batch{}, fmt.Errorf("deadletters: archive records of %s: %w", b.ID, err)
	}
	if err := a.putSummary(ctx, b, len(chunks), users); err != nil {
		return Batch{}, err
	}
	return b, nil
}

// index writes an index item for each user the records name (keyed by
// the first of UserKeys) and returns their keys.
func (a *Archive) index(ctx context.Context, b Batch, records []events.DynamoDBEventRecord, expires int64) ([]string, error) {
	if a.UserKeys == nil {
		return nil, nil
	}
	var keys []string
	for _, u := range UsersOf(records) {
		keys = append(keys, a.UserKeys(ctx, u)[0])
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	reqs := make([]types.WriteRequest, 0, len(keys))
	for _, k := range keys {
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(userPrefix + k), schema.AttrSK: ddb.S(indexSK(b.Function, b.ID)), schema.TTL: ddb.N(expires),
		}}})
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return nil, fmt.Errorf("deadletters: index the users of %s: %w", b.ID, err)
	}
	return keys, nil
}

// forgetUsers deletes b's index items of users.
func (a *Archive) forgetUsers(ctx context.Context, b Batch, users []string) error {
	reqs := make([]types.WriteRequest, 0, len(users))
	for _, u := range users {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(userPrefix + u), schema.AttrSK: ddb.S(indexSK(b.Function, b.ID)),
		}}})
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return fmt.Errorf("deadletters: forget the users of %s: %w", b.ID, err)
	}
	return nil
}

// indexSK is the sort key of a batch's index items: {function}#{id}.
func indexSK(function, id string) string { return function + "#" + id }

func (a *Archive) putSummary(ctx context.Context, b Batch, chunks int, users []string) error {
	body, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("deadletters: encode batch: %w", err)
	}
	key := summaryKey(b.Function, b.ArchivedAt, b.ID)
	item, err := attributevalue.MarshalMap(summaryItem{
		PK: key[schema.AttrPK].(*types.AttributeValueMemberS).Value, SK: key[schema.AttrSK].(*types.AttributeValueMemberS).Value,
		Batch: string(body), Chunks: chunks, Expires: b.Expires.Unix(), Users: users,
	})
	if err != nil {
		return fmt.Errorf("deadletters: encode batch: %w", err)
	}
	if _, err := a.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.Table), Item: item}); err != nil {
		return fmt.Errorf("deadletters: archive %s: %w", b.ID, err)
	}
	return nil
}

// List returns the batches of function still parked, oldest first.
func (a *Archive) List(ctx context.Context, function string) ([]Batch, error) {
	e := ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(summaryPrefix + function))))
	in := ddb.QueryInput(a.Table, e)
	in.ConsistentRead = aws.Bool(true)
	var out []Batch
	for pages := dynamodb.NewQueryPaginator(a.DB, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("deadletters: list %s: %w", function, err)
		}
		for _, raw := range page.Items {
			b, _, err := decodeSummary(raw)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
	}
	return out, nil
}

func decodeSummary(raw map[string]types.AttributeValue) (Batch, int, error) {
	b, it, err := decodeSummaryItem(raw)
	return b, it.Chunks, err
}

func decodeSummaryItem(raw map[string]types.AttributeValue) (Batch, summaryItem, error) {
	var it summaryItem
	if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
		return Batch{}, it, fmt.Errorf("deadletters: decode batch: %w", err)
	}
	var b Batch
	if err := json.Unmarshal([]byte(it.Batch), &b); err != nil {
		return Batch{}, it, fmt.Errorf("deadletters: decode batch %s: %w", it.SK, err)
	}
	if b.Expires.IsZero() && it.Expires > 0 {
		b.Expires = time.Unix(it.Expires, 0).UTC()
	}
	return b, it, nil
}

// Get returns one parked batch of function.
func (a *Archive) Get(ctx context.Context, function, id string) (Batch, error) {
	batches, err := a.List(ctx, function)
	if err != nil {
		return Batch{}, err
	}
	for _, b := range batches {
		if b.ID == id {
			return b, nil
		}
	}
	return Batch{}, ErrNotFound
}

// Records returns the records of a parked batch, in stream order.
func (a *Archive) Records(ctx context.Context, b Batch) ([]events.DynamoDBEventRecord, error) {
	e := ddb.MustBuild(expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(chunkPrefix + b.ID))))
	in := ddb.QueryInput(a.Table, e)
	in.ConsistentRead = aws.Bool(true)
	var records []events.DynamoDBEventRecord
	for pages := dynamodb.NewQueryPaginator(a.DB, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("deadletters: read records of %s: %w", b.ID, err)
		}
		for _, raw := range page.Items {
			var c chunkItem
			if err := attributevalue.UnmarshalMap(raw, &c); err != nil {
				return nil, fmt.Errorf("deadletters: decode chunk of %s: %w", b.ID, err)
			}
			part, err := unpack(c.Data)
			if err != nil {
				return nil, fmt.Errorf("deadletters: chunk %s of %s: %w", c.SK, b.ID, err)
			}
			records = append(records, part...)
		}
	}
	if len(records) != b.Size {
		return nil, fmt.Errorf("deadletters: batch %s has %d of its %d records", b.ID, len(records), b.Size)
	}
	return records, nil
}

// Retry records a redrive that applied the records before from and not
// the rest: the batch keeps only those, with the error. Call it holding
// the batch's lease.
func (a *Archive) Retry(ctx context.Context, b Batch, records []events.DynamoDBEventRecord, from int, cause error) (Batch, error) {
	next := b
	next.Attempts++
	if cause != nil {
		next.Error = cause.Error()
	}
	return a.replace(ctx, b, next, records[from:])
}

// replace puts what is left of b, as next, in its place: rewritten where
// it lies when the records are the same range, else archived as a batch
// of its own before b is removed (a crash in between leaves both, and
// whoever retries finds next already archived). Call it holding b's lease.
func (a *Archive) replace(ctx context.Context, b, next Batch, rest []events.DynamoDBEventRecord) (Batch, error) {
	if len(rest) == 0 {
		return Batch{}, a.Remove(ctx, b)
	}
	next.ID = BatchID(b.Function, b.ShardID, rest[0].Change.SequenceNumber, b.Last)
	next.First = rest[0].Change.SequenceNumber
	if len(rest) != b.Size && next.ID == b.ID {
		// The same range with records left out (an erasure): a batch of
		// its own, named after the one it replaces.
		next.ID = BatchID(b.Function, b.ShardID, next.First, b.Last+"#"+b.ID)
	}
	if next.ID == b.ID {
		// The same range failed again: rewrite its summary in place.
		it, err := a.summary(ctx, b)
		if err != nil {
			return Batch{}, err
		}
		return next, a.putSummary(ctx, next, it.Chunks, it.Users)
	}
	next.ArchivedAt = b.ArchivedAt
	next.Expires = b.Expires
	if _, err := a.Put(ctx, next, rest); err != nil {
		return Batch{}, err
	}
	return next, a.Remove(ctx, b)
}

// summary reads b's summary item.
func (a *Archive) summary(ctx context.Context, b Batch) (summaryItem, error) {
	out, err := a.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(a.Table), Key: summaryKey(b.Function, b.ArchivedAt, b.ID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return summaryItem{}, fmt.Errorf("deadletters: read %s: %w", b.ID, err)
	}
	if out.Item == nil {
		return summaryItem{}, ErrNotFound
	}
	_, it, err := decodeSummaryItem(out.Item)
	return it, err
}

// Remove deletes a batch: its summary first, so it is never listed
// without its records, then the records, then its index items.
func (a *Archive) Remove(ctx context.Context, b Batch) error {
	it, err := a.summary(ctx, b)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := a.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(a.Table), Key: summaryKey(b.Function, b.ArchivedAt, b.ID),
	}); err != nil {
		return fmt.Errorf("deadletters: remove %s: %w", b.ID, err)
	}
	reqs := make([]types.WriteRequest, 0, it.Chunks+len(it.Users))
	for i := range it.Chunks {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(chunkPrefix + b.ID), schema.AttrSK: ddb.S(chunkSK(i)),
		}}})
	}
	for _, u := range it.Users {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			schema.AttrPK: ddb.S(userPrefix + u), schema.AttrSK: ddb.S(indexSK(b.Function, b.ID)),
		}}})
	}
	if err := ddb.BatchWrite(ctx, a.DB, a.Table, reqs); err != nil {
		return fmt.Errorf("deadletters: remove records of %s: %w", b.ID, err)
	}
	return nil
}

// pack encodes records as gzip'd JSON arrays of at most chunkBytes each.
func pack(records []events.DynamoDBEventRecord) ([][]byte, error) {
	var chunks [][]byte
	for start := 0; start < len(records); {
		// Grow the chunk while it fits; a single record that does not fit
		// alone still gets a chunk of its own.
		end := start + 1
		best, err := gz(records[start:end])
		if err != nil {
			return nil, err
		}
		for end < len(records) {
			next := min(len(records), end+max(1, (end-start)))
			c, err := gz(records[start:next])
			if err != nil {
				return nil, err
			}
			if len(c) > chunkBytes {
				break
			}
			best, end = c, next
		}
		chunks = append(chunks, best)
		start = end
	}
	return chunks, nil
}

func gz(records []events.DynamoDBEventRecord) ([]byte, error) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if err := json.NewEncoder(w).Encode(records); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func unpack(data []byte) ([]events.DynamoDBEventRecord, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var records []events.DynamoDBEventRecord
	return records, json.Unmarshal(raw, &records)
}

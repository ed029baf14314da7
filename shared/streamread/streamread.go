// Package streamread reads DynamoDB streams the way Lambda's event source
// mapping does and speaks its formats: the shards of a stream, each read in
// order a page at a time; stream records converted into the
// events.DynamoDBEventRecord a processor receives (record.go); and the
// on-failure record that locates a dead-lettered batch in its stream
// (onfailure.go). The local stack's pollers, the redrive command and tests
// that look at a stream all read through it.
package streamread

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// ShardClient is the part of the DynamoDB Streams API that reads a shard.
type ShardClient interface {
	GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(context.Context, *dynamodbstreams.GetRecordsInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Client is the part of the DynamoDB Streams API that lists a stream's
// shards and reads them.
type Client interface {
	ShardClient
	DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
}

// TableDescriber is the part of the DynamoDB API that names a table's
// stream.
type TableDescriber interface {
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// ErrExpired means the stream no longer holds the records where reading
// would start or carry on: a stream keeps records 24 hours.
var ErrExpired = errors.New("the stream no longer holds these records (kept 24 hours)")

// pageSize is the most records GetRecords returns in one page.
const pageSize = 1000

// StreamARN returns the ARN of table's latest stream; a table without a
// stream is an error.
func StreamARN(ctx context.Context, db TableDescriber, table string) (string, error) {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", table, err)
	}
	arn := aws.ToString(out.Table.LatestStreamArn)
	if arn == "" {
		return "", fmt.Errorf("table %s has no stream", table)
	}
	return arn, nil
}

// Shards lists every shard of the stream, across DescribeStream's pages, in
// the order the stream gives them.
func Shards(ctx context.Context, c Client, streamARN string) ([]types.Shard, error) {
	var all []types.Shard
	var from *string
	for {
		out, err := c.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{
			StreamArn: aws.String(streamARN), ExclusiveStartShardId: from,
		})
		if err != nil {
			return nil, err
		}
		all = append(all, out.StreamDescription.Shards...)
		if from = out.StreamDescription.LastEvaluatedShardId; from == nil {
			return all, nil
		}
	}
}

// Shard reads one shard in order, a page at a time, remembering the last
// record it returned so that a lost iterator costs nothing: Next gets a
// fresh one after that record. Set the fields, then call Next.
type Shard struct {
	Client    ShardClient
	StreamARN string
	ShardID   string
	// Region fills awsRegion of records that do not carry one.
	Region string
	// At, when set, is the sequence number of the first record to read;
	// otherwise reading starts at the oldest record the shard holds.
	At string
	// Expired, when set, is told that the records after sequence number
	// after left the stream before they were read; reading then carries on
	// from the oldest record the shard holds. When nil, Next fails with
	// ErrExpired instead.
	Expired func(after string)
	// Skip, when set, is told of each record that cannot be converted, and
	// reading carries on past it. When nil, Next fails on such a record.
	Skip func(error)

	iter   *string
	after  string // sequence number of the last record returned
	closed bool
}

// Closed reports whether the shard has been read to its end: it was closed
// (split or retired) and Next returned its last page.
func (s *Shard) Closed() bool { return s.closed }

// After is the sequence number of the last record the reader returned or
// skipped, "" before the first.
func (s *Shard) After() string { return s.after }

// Advance moves the reader past page, which another reader of the same shard
// read from where this one stands (After): its next page starts after the
// page's last record. closed says page was the shard's last.
func (s *Shard) Advance(page []events.DynamoDBEventRecord, closed bool) {
	if len(page) > 0 {
		s.after, s.iter = page[len(page)-1].Change.SequenceNumber, nil
	}
	if closed {
		s.closed, s.iter = true, nil
	}
}

// Next returns the next page of records, possibly empty: an open shard
// whose reader has caught up returns empty pages until more is written. A
// failed call may be retried; it resumes after the last record returned.
func (s *Shard) Next(ctx context.Context) ([]events.DynamoDBEventRecord, error) {
	if s.closed {
		return nil, nil
	}
	fresh := s.iter == nil
	if fresh {
		iter, err := s.iterator(ctx)
		if err != nil {
			return nil, err
		}
		s.iter = iter
	}
	out, err := s.Client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: s.iter, Limit: aws.Int32(pageSize)})
	if err != nil {
		s.iter = nil
		var expired *types.ExpiredIteratorException
		var trimmed *types.TrimmedDataAccessException
		if !fresh && ctx.Err() == nil && (errors.As(err, &expired) || errors.As(err, &trimmed)) {
			// A fresh iterator after the last record returned is always
			// safe, and is the cure for expired iterators and for DynamoDB
			// Local's occasional TrimmedDataAccessException on an iterator
			// issued while the shard was empty.
			return s.Next(ctx)
		}
		if errors.As(err, &trimmed) {
			return nil, fmt.Errorf("read shard %s: %w: %w", s.ShardID, ErrExpired, err)
		}
		return nil, fmt.Errorf("read shard %s: %w", s.ShardID, err)
	}
	page := make([]events.DynamoDBEventRecord, 0, len(out.Records))
	after := s.after
	for _, r := range out.Records {
		rec, err := LambdaRecord(r, s.StreamARN, s.Region)
		if err != nil {
			if s.Skip == nil {
				s.iter = nil // read this page again from after the last record returned
				return nil, fmt.Errorf("read shard %s: %w", s.ShardID, err)
			}
			s.Skip(err)
			continue
		}
		page = append(page, rec)
		after = rec.Change.SequenceNumber
	}
	s.after = after
	s.iter = out.NextShardIterator
	s.closed = s.iter == nil
	return page, nil
}

// iterator points at the record after the last one returned, or at the
// start when none was.
func (s *Shard) iterator(ctx context.Context) (*string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(s.StreamARN), ShardId: aws.String(s.ShardID),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
	}
	switch {
	case s.after != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(s.after)
	case s.At != "":
		in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(s.At)
	}
	out, err := s.Client.GetShardIterator(ctx, in)
	var trimmed *types.TrimmedDataAccessException
	if errors.As(err, &trimmed) {
		if s.after != "" && s.Expired != nil {
			// What follows the last record returned is lost to every
			// reader; carry on from the oldest record held.
			s.Expired(s.after)
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeTrimHorizon, nil
			out, err = s.Client.GetShardIterator(ctx, in)
		} else {
			return nil, fmt.Errorf("locate shard %s: %w: %w", s.ShardID, ErrExpired, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("locate shard %s: %w", s.ShardID, err)
	}
	return out.ShardIterator, nil
}

// ShardRecords are the records read from one shard.
type ShardRecords struct {
	ShardID string
	Records []events.DynamoDBEventRecord
}

// All reads every shard of the stream from its oldest record to the
// present (the first empty page of an open shard), in the order Shards
// gives them: what a test reads to see what a table's writes put on its
// stream.
func All(ctx context.Context, c Client, streamARN, region string) ([]ShardRecords, error) {
	shards, err := Shards(ctx, c, streamARN)
	if err != nil {
		return nil, err
	}
	out := make([]ShardRecords, 0, len(shards))
	for _, sh := range shards {
		r := &Shard{Client: c, StreamARN: streamARN, ShardID: aws.ToString(sh.ShardId), Region: region}
		got := ShardRecords{ShardID: r.ShardID}
		for !r.Closed() {
			page, err := r.Next(ctx)
			if err != nil {
				return nil, err
			}
			if len(page) == 0 {
				break
			}
			got.Records = append(got.Records, page...)
		}
		out = append(out, got)
	}
	return out, nil
}

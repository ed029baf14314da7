package awsapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/rallyhq/rally/infra/local/policy"
)

// TableARN is the ARN a policy names table by (its physical name).
func TableARN(table string) string {
	return "arn:aws:dynamodb:" + Region + ":" + AccountID + ":table/" + table
}

// dynamoCall is what a DynamoDB or DynamoDB Streams request names that
// the policy check needs.
type dynamoCall struct {
	itemRequest
	RequestItems  map[string]json.RawMessage
	TransactItems []map[string]itemRequest
	StreamArn     string
	ShardIterator string
	ResourceArn   string
}

// transactActions are the actions a transaction's items need, by the
// item's kind.
var transactActions = map[string]string{
	"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem",
}

// dynamoDB checks a DynamoDB or DynamoDB Streams call and forwards it to
// DynamoDB Local.
func (c *call) dynamoDB() {
	var in dynamoCall
	if !c.decode(&in) {
		return
	}
	if !c.allowed(c.dynamoNeeds(in)...) {
		return
	}
	if c.forwardDynamoDB() == http.StatusOK && c.opts.Written != nil {
		if tables := writtenTables(c.op.op, in); len(tables) > 0 {
			c.opts.Written(tables...)
		}
	}
}

// writtenTables lists the tables a write call names.
func writtenTables(op string, in dynamoCall) []string {
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		return []string{in.TableName}
	case "BatchWriteItem":
		return slices.Collect(maps.Keys(in.RequestItems))
	case "TransactWriteItems":
		var out []string
		for _, item := range in.TransactItems {
			for kind, part := range item {
				if kind == "Put" || kind == "Update" || kind == "Delete" {
					out = append(out, part.TableName)
				}
			}
		}
		return out
	}
	return nil
}

// dynamoNeeds lists every action and resource the call touches, as IAM
// authorizes it: a table or index ARN, each table of a batch, each item of
// a transaction by its own action, a stream's ARN; item calls with the
// condition keys fine-grained grants read (conditionKeys).
func (c *call) dynamoNeeds(in dynamoCall) []need {
	action := "dynamodb:" + c.op.op
	switch c.op.op {
	case "BatchGetItem", "BatchWriteItem":
		tables := make([]string, 0, len(in.RequestItems))
		for t := range in.RequestItems {
			tables = append(tables, t)
		}
		sort.Strings(tables)
		out := make([]need, 0, len(tables))
		for _, t := range tables {
			out = append(out, need{action, tableARN(t), conditionKeys(c.op.op, batchRequest(c.op.op, in.RequestItems[t]))})
		}
		return out
	case "TransactWriteItems", "TransactGetItems":
		var out []need
		for _, item := range in.TransactItems {
			for kind, part := range item {
				if a, ok := transactActions[kind]; ok {
					op := a
					if kind == "Get" {
						op = c.op.op // a Select of its own, as a read
					}
					out = append(out, need{"dynamodb:" + a, tableARN(part.TableName), conditionKeys(op, part)})
				}
			}
		}
		return out
	case "ListTables", "ListStreams", "DescribeLimits", "DescribeEndpoints", "ListBackups", "ListGlobalTables":
		return []need{{action, "*", nil}}
	case "DescribeStream", "GetShardIterator":
		return []need{{action, streamARN(in.StreamArn), nil}}
	case "GetRecords":
		return []need{{action, c.iteratorStream(in.ShardIterator), nil}}
	}
	var keys policy.Keys
	if slices.Contains(itemCalls, c.op.op) {
		keys = conditionKeys(c.op.op, in.itemRequest)
	}
	switch {
	case in.TableName != "" && in.IndexName != "":
		return []need{{action, tableARN(in.TableName) + "/index/" + in.IndexName, keys}}
	case in.TableName != "":
		return []need{{action, tableARN(in.TableName), keys}}
	case in.ResourceArn != "":
		return []need{{action, in.ResourceArn, nil}}
	}
	return []need{{action, "*", nil}}
}

// itemCalls are the calls on one table's items.
var itemCalls = []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan"}

// batchRequest merges what a batch asks of one table into one request:
// BatchGetItem's keys and projection, BatchWriteItem's items and keys.
func batchRequest(op string, raw json.RawMessage) itemRequest {
	var in itemRequest
	if op == "BatchGetItem" {
		_ = json.Unmarshal(raw, &in)
		return in
	}
	var writes []struct {
		PutRequest    *struct{ Item map[string]json.RawMessage }
		DeleteRequest *struct{ Key map[string]json.RawMessage }
	}
	_ = json.Unmarshal(raw, &writes)
	in.Item = map[string]json.RawMessage{}
	for _, w := range writes {
		switch {
		case w.PutRequest != nil:
			maps.Copy(in.Item, w.PutRequest.Item)
		case w.DeleteRequest != nil:
			maps.Copy(in.Item, w.DeleteRequest.Key)
		}
	}
	return in
}

// tableARN is the ARN of a table named by name or by ARN.
func tableARN(table string) string {
	if strings.HasPrefix(table, "arn:") {
		return table
	}
	return TableARN(table)
}

// streamARN is a stream's ARN as a policy names it: DynamoDB Local's own
// stream ARNs carry its region ("ddblocal"), a policy the local one.
func streamARN(arn string) string {
	if _, rest, ok := strings.Cut(arn, ":table/"); ok {
		return "arn:aws:dynamodb:" + Region + ":" + AccountID + ":table/" + rest
	}
	return arn
}

// iterator is the stream a shard iterator reads, until it expires (15
// minutes after it was issued, as in DynamoDB Streams).
type iterator struct {
	stream  string
	expires time.Time
}

const iteratorLife = 15 * time.Minute

// iteratorStream is the stream ARN a shard iterator reads, "*" for an
// iterator this endpoint never issued (no grant on a stream allows it).
func (c *call) iteratorStream(it string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.iterators[it]; ok && time.Now().Before(i.expires) {
		return i.stream
	}
	return "*"
}

// remember notes which stream the iterators a response hands out read.
func (s *Server) remember(stream string, iterators ...string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.pruned) > time.Minute {
		for it, i := range s.iterators {
			if now.After(i.expires) {
				delete(s.iterators, it)
			}
		}
		s.pruned = now
	}
	for _, it := range iterators {
		if it != "" {
			s.iterators[it] = iterator{stream: stream, expires: now.Add(iteratorLife)}
		}
	}
}

// forwardDynamoDB sends the call to DynamoDB Local, signed with its
// credentials, and relays the answer unchanged (its CRC32 header
// included). Shard iterators the answer hands out are remembered with the
// stream they read.
func (c *call) forwardDynamoDB() (status int) {
	ctx := c.r.Context()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.opts.DynamoDB, "/")+"/", bytes.NewReader(c.body))
	if err != nil {
		c.fail(http.StatusInternalServerError, "InternalServerError", err.Error())
		return 0
	}
	req.Header.Set("Content-Type", c.r.Header.Get("Content-Type"))
	req.Header.Set("X-Amz-Target", c.r.Header.Get("X-Amz-Target"))
	// Relay the bytes DynamoDB Local sends, which its CRC32 covers.
	req.Header.Set("Accept-Encoding", "identity")
	sum := sha256.Sum256(c.body)
	if err := v4.NewSigner().SignHTTP(ctx, c.opts.DynamoDBCredentials, req, hex.EncodeToString(sum[:]), "dynamodb", Region, time.Now()); err != nil {
		c.fail(http.StatusInternalServerError, "InternalServerError", "sign the call to DynamoDB Local: "+err.Error())
		return 0
	}
	resp, err := c.forward.Do(req)
	if err != nil {
		c.fail(http.StatusServiceUnavailable, "ServiceUnavailable", "DynamoDB Local: "+err.Error())
		return 0
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.fail(http.StatusServiceUnavailable, "ServiceUnavailable", "DynamoDB Local: "+err.Error())
		return 0
	}
	if resp.StatusCode == http.StatusOK {
		c.rememberIterators(out)
	}
	for _, h := range []string{"Content-Type", "X-Amz-Crc32", "X-Amzn-Requestid"} {
		if v := resp.Header.Get(h); v != "" {
			c.w.Header().Set(h, v)
		}
	}
	c.w.WriteHeader(resp.StatusCode)
	_, _ = c.w.Write(out)
	return resp.StatusCode
}

func (c *call) rememberIterators(out []byte) {
	switch c.op.op {
	case "GetShardIterator":
		var in struct{ StreamArn string }
		var res struct{ ShardIterator string }
		if json.Unmarshal(c.body, &in) == nil && json.Unmarshal(out, &res) == nil {
			c.remember(streamARN(in.StreamArn), res.ShardIterator)
		}
	case "GetRecords":
		var in struct{ ShardIterator string }
		var res struct{ NextShardIterator string }
		if json.Unmarshal(c.body, &in) == nil && json.Unmarshal(out, &res) == nil {
			if stream := c.iteratorStream(in.ShardIterator); stream != "*" {
				c.remember(stream, res.NextShardIterator)
			}
		}
	}
}

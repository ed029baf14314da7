package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/infra/local/testenv"
	"github.com/rallyhq/rally/shared/clock"
	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/players/dynamo"
	"github.com/rallyhq/rally/shared/schema"
)

// metered is DynamoDB asking every call of the erasure for its consumed
// capacity, and adding it up.
type metered struct {
	*dynamodb.Client
	mu          sync.Mutex
	read, write float64
	calls       int
}

func (m *metered) add(cs ...types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	for _, c := range cs {
		if c.ReadCapacityUnits != nil || c.WriteCapacityUnits != nil {
			m.read += aws.ToFloat64(c.ReadCapacityUnits)
			m.write += aws.ToFloat64(c.WriteCapacityUnits)
		} else {
			// DynamoDB Local reports only the total: a read call's is reads.
			m.read += aws.ToFloat64(c.CapacityUnits)
		}
	}
}

func (m *metered) addWrite(cs ...types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	for _, c := range cs {
		m.write += aws.ToFloat64(c.CapacityUnits)
	}
}

func (m *metered) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.GetItem(ctx, in, opts...)
	if err == nil && out.ConsumedCapacity != nil {
		m.add(*out.ConsumedCapacity)
	}
	return out, err
}

func (m *metered) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.Query(ctx, in, opts...)
	if err == nil && out.ConsumedCapacity != nil {
		m.add(*out.ConsumedCapacity)
	}
	return out, err
}

func (m *metered) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.Scan(ctx, in, opts...)
	if err == nil && out.ConsumedCapacity != nil {
		m.add(*out.ConsumedCapacity)
	}
	return out, err
}

func (m *metered) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.UpdateItem(ctx, in, opts...)
	if err == nil && out.ConsumedCapacity != nil {
		m.addWrite(*out.ConsumedCapacity)
	}
	return out, err
}

func (m *metered) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		m.addWrite(out.ConsumedCapacity...)
	}
	return out, err
}

func (m *metered) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.BatchWriteItem(ctx, in, opts...)
	if err == nil {
		m.addWrite(out.ConsumedCapacity...)
	}
	return out, err
}

// seedPlayers writes n players, each listing 3 others, with their reverse
// entries, in concurrent batches.
func seedPlayers(t *testing.T, client *dynamodb.Client, table string, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(n), 1))
	var reqs []types.WriteRequest
	for i := range n {
		p := fmt.Sprintf("player-%07d", i)
		var friends []types.AttributeValue
		for range 3 {
			f := fmt.Sprintf("player-%07d", r.IntN(n))
			friends = append(friends, ddb.S(f))
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: dynamo.ListedItem(f, p)}})
		}
		// (A repeated friend's entry is written twice: the same item.)
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			schema.AttrPlayerID: ddb.S(p), schema.AttrDisplayName: ddb.S(p), schema.AttrFriendIDs: &types.AttributeValueMemberL{Value: friends},
			schema.AttrFriendsIndexed: &types.AttributeValueMemberBOOL{Value: true}, schema.AttrUpdatedAt: ddb.S(ddb.FormatTime(t0)),
		}}})
	}
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(8)
	const chunk = 25 * 40
	for start := 0; start < len(reqs); start += chunk {
		part := reqs[start:min(start+chunk, len(reqs))]
		g.Go(func() error { return ddb.BatchWrite(ctx, client, table, dedupe(part)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// dedupe drops repeated puts of one key from a batch (BatchWriteItem
// refuses them).
func dedupe(reqs []types.WriteRequest) []types.WriteRequest {
	seen := map[string]bool{}
	var out []types.WriteRequest
	for _, r := range reqs {
		k := r.PutRequest.Item[schema.AttrPlayerID].(*types.AttributeValueMemberS).Value
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// TestAnErasureCostsTheSameWhateverTheTableSize erases a player listed by
// 5 others, among 10,000 and among 200,000 players (RALLY_TEST_SCALE=full;
// 1,000 and 20,000 by default), each with a list of 3 friends, and
// compares the capacity the erasure consumed: the same, as it reads only
// the lists that name the player. Measured on DynamoDB Local (whose
// totals count the by_listed index's deletes too): 6.5 RCU and 37 WCU in
// 15 calls at both 10,000 and 200,000 players.
func TestAnErasureCostsTheSameWhateverTheTableSize(t *testing.T) {
	ctx := context.Background()
	type cost struct {
		read, write float64
		calls       int
	}
	var costs []cost
	sizes := []int{testenv.Scale(1000, 10000), testenv.Scale(20000, 200000)}
	for _, n := range sizes {
		client, names, _ := testenv.DynamoDB(t)
		table := names.Of(schema.Players)
		seedPlayers(t, client, table, n)
		s := &dynamo.Players{DB: client, Table: table, Clock: clock.Fixed(t0)}
		if err := s.PutFriends(ctx, erased, []string{"player-0000001", "player-0000002", "player-0000003"}); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			p := fmt.Sprintf("player-%07d", 10+i)
			friends, err := s.Friends(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.PutFriends(ctx, p, append(friends, erased)); err != nil {
				t.Fatal(err)
			}
		}
		m := &metered{Client: client}
		s.DB = m
		if done, err := s.ErasePlayer(ctx, erased); err != nil || !done {
			t.Fatal(done, err)
		}
		t.Logf("erasure among %d players: %.1f RCU, %.1f WCU in %d calls", n, m.read, m.write, m.calls)
		costs = append(costs, cost{m.read, m.write, m.calls})
	}
	if a, b := costs[0], costs[1]; a.calls != b.calls || b.read > a.read+2 || b.write > a.write+2 {
		t.Fatalf("the erasure cost %+v among %d players, %+v among %d", a, sizes[0], b, sizes[1])
	}
}

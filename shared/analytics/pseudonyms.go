package analytics

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/rallyhq/rally/shared/ddb"
	"github.com/rallyhq/rally/shared/schema"
)

// SecretAttr is the Players attribute holding a player's analytics secret
// (32 random bytes, binary). Erasure deletes the Players item and with it
// the secret: the player's exported events can no longer be tied to them.
const SecretAttr = schema.AttrAnalyticsSecret

const (
	secretBytes = 32
	pidHexLen   = 32
	// secretCreators bounds the concurrent secret creations of one call.
	secretCreators = 16
)

// Pseudonyms computes the pseudonymous user ids (PIDs) events carry:
// HMAC-SHA256 of the user id under the user's own secret. Secrets are read
// fresh on every call and never cached beyond it, so an erased player's
// secret is gone for the next batch.
type Pseudonyms struct {
	DB    ddb.DB
	Table string // Players, physical name
	// Guard, when set, keeps an erased user's secret from coming back: a
	// secret is created only in a transaction with Guard's check that no
	// erasure of the user was requested at or after the user's first event
	// in the batch. Events of an erased user shipped late (the stream runs
	// behind the erasure) carry no PID.
	Guard ErasureGuard
}

// ErasureGuard is the erasure records' side of creating a secret.
type ErasureGuard interface {
	// Unerased is a transaction item that holds while no erasure of user
	// was requested at or after since.
	Unerased(user string, since time.Time) types.TransactWriteItem
}

// PIDsSince returns the PID of each user whose events in hand start at
// since[user], creating the secret of a user who has none; concurrent
// callers creating the same secret agree on it. A user erased at or after
// that time gets the PID "" (no secret is created for them).
func (p *Pseudonyms) PIDsSince(ctx context.Context, since map[string]time.Time) (map[string]string, error) {
	var keys []map[string]types.AttributeValue
	seen := map[string]bool{}
	for u := range since {
		if u != "" {
			seen[u] = true
			keys = append(keys, p.key(u))
		}
	}
	if len(keys) == 0 {
		return map[string]string{}, nil
	}
	items, err := ddb.BatchGet(ctx, p.DB, p.Table, keys, true, schema.AttrPlayerID, SecretAttr)
	if err != nil {
		return nil, fmt.Errorf("analytics: read secrets: %w", err)
	}
	secrets := make(map[string][]byte, len(keys))
	for _, it := range items {
		id, ok := it[schema.AttrPlayerID].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		secret, ok, err := secretOf(it)
		if err != nil {
			return nil, err
		}
		if ok {
			secrets[id.Value] = secret
		}
	}
	var missing []string
	for u := range seen {
		if secrets[u] == nil {
			missing = append(missing, u)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(secretCreators)
	for _, u := range missing {
		g.Go(func() error {
			secret, err := p.create(gctx, u, since[u])
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			secrets[u] = secret
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	pids := make(map[string]string, len(seen))
	for u := range seen {
		if secrets[u] != nil {
			pids[u] = PID(secrets[u], u)
		} else {
			pids[u] = ""
		}
	}
	return pids, nil
}

func (p *Pseudonyms) key(user string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPlayerID: ddb.S(user)}
}

// create stores a new secret unless one appeared meanwhile, and returns the
// secret that is stored: the first writer wins, every racer reads its value.
// With a Guard it returns nil (and creates nothing) for a user erased at or
// after since.
func (p *Pseudonyms) create(ctx context.Context, user string, since time.Time) ([]byte, error) {
	fresh := make([]byte, secretBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("analytics: new secret: %w", err)
	}
	attr := expression.Name(SecretAttr)
	update := ddb.MustBuild(expression.NewBuilder().WithUpdate(
		expression.Set(attr, expression.IfNotExists(attr, expression.Value(fresh)))))
	if p.Guard != nil {
		return p.createGuarded(ctx, user, since, update)
	}
	in := ddb.UpdateInput(p.Table, p.key(user), update)
	in.ReturnValues = types.ReturnValueUpdatedNew
	out, err := p.DB.UpdateItem(ctx, in)
	if err != nil {
		// The user id stays out of errors, which end up in logs.
		return nil, fmt.Errorf("analytics: create secret: %w", err)
	}
	secret, ok, err := secretOf(out.Attributes)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("analytics: create secret: the update returned no secret")
	}
	return secret, nil
}

// createGuarded creates the secret in one transaction with the guard's
// check, then reads back the secret that is stored.
func (p *Pseudonyms) createGuarded(ctx context.Context, user string, since time.Time, update expression.Expression) ([]byte, error) {
	_, err := p.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		p.Guard.Unerased(user, since),
		{Update: ddb.TransactUpdate(p.Table, p.key(user), update)},
	}})
	if failed, ok := ddb.CancelledBy(err); ok && slices.Contains(failed, 0) {
		return nil, nil // erased: no secret, no PID
	}
	if err != nil {
		return nil, fmt.Errorf("analytics: create secret: %w", err)
	}
	projection := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(SecretAttr))))
	out, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(p.Table), Key: p.key(user), ConsistentRead: aws.Bool(true),
		ProjectionExpression: projection.Projection(), ExpressionAttributeNames: projection.Names(),
	})
	if err != nil {
		return nil, fmt.Errorf("analytics: read the created secret: %w", err)
	}
	secret, ok, err := secretOf(out.Item)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("analytics: create secret: no secret after the transaction")
	}
	return secret, nil
}

// secretOf reads the secret of a Players item; ok is false when it has none.
func secretOf(item map[string]types.AttributeValue) ([]byte, bool, error) {
	switch v := item[SecretAttr].(type) {
	case nil:
		return nil, false, nil
	case *types.AttributeValueMemberB:
		if len(v.Value) != secretBytes {
			return nil, false, fmt.Errorf("analytics: a player's %s has %d bytes, want %d", SecretAttr, len(v.Value), secretBytes)
		}
		return v.Value, true, nil
	default:
		return nil, false, fmt.Errorf("analytics: a player's %s is a %T, not binary", SecretAttr, v)
	}
}

// PID is the hex of HMAC-SHA256(secret, user), cut to 128 bits: what an
// event carries as user_pid.
func PID(secret []byte, user string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(user))
	return hex.EncodeToString(mac.Sum(nil))[:pidHexLen]
}

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

// SecretAttr holds a user's analytics secret (32 random bytes, binary) in
// their AnalyticsSecrets item. Deployments from before that table kept it
// in the user's Players item, under the same name; PIDsSince moves such a
// secret over the first time it needs it, so the user's PID stays the same.
const SecretAttr = schema.AttrAnalyticsSecret

const (
	secretBytes = 32
	pidHexLen   = 32
	// secretCreators bounds the concurrent secret creations of one call.
	secretCreators = 16
	// settleAttempts bounds how often one user's secret is looked for
	// again after a concurrent caller stored or moved it first.
	settleAttempts = 8
)

// Pseudonyms computes the pseudonymous user ids (PIDs) events carry:
// HMAC-SHA256 of the user id under the user's own secret. Secrets are read
// fresh on every call and never cached beyond it, so an erased user's
// secret is gone for the next batch.
type Pseudonyms struct {
	DB ddb.DB
	// Table is the AnalyticsSecrets table (physical name).
	Table string
	// Legacy is the Players table (physical name), where deployments kept
	// secrets before AnalyticsSecrets existed: a user with no secret in
	// Table but one there has it moved over (and removed from Players) in
	// one transaction. Empty means there is nothing to move.
	Legacy string
	// Guard, when set, keeps an erased user's secret from coming back: a
	// secret is stored (created or moved) only in a transaction with
	// Guard's check that no erasure of the user was requested at or after
	// the user's first event in the batch. Events of an erased user
	// shipped late (the stream runs behind the erasure) carry no PID.
	Guard ErasureGuard
}

// ErasureGuard is the erasure records' side of storing a secret.
type ErasureGuard interface {
	// Unerased are transaction items that all hold while no erasure of
	// user was requested at or after since.
	Unerased(ctx context.Context, user string, since time.Time) []types.TransactWriteItem
}

// PIDsSince returns the PID of each user whose events in hand start at
// since[user], creating the secret of a user who has none; concurrent
// callers creating or moving the same secret agree on it. A user erased at
// or after that time gets the PID "" (no secret is stored for them).
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
	items, err := ddb.BatchGet(ctx, p.DB, p.Table, keys, true, schema.AttrUserID, SecretAttr)
	if err != nil {
		return nil, fmt.Errorf("analytics: read secrets: %w", err)
	}
	secrets := make(map[string][]byte, len(keys))
	for _, it := range items {
		id, ok := it[schema.AttrUserID].(*types.AttributeValueMemberS)
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
			secret, err := p.settle(gctx, u, since[u])
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
	return map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user)}
}

func (p *Pseudonyms) legacyKey(user string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{schema.AttrPlayerID: ddb.S(user)}
}

// settle returns the secret of a user the batch read found none for: the
// one kept in Players, moved over, or else a new one; whichever a
// concurrent caller stored first wins, and every racer returns it. It
// returns nil, storing nothing, for a user erased at or after since.
func (p *Pseudonyms) settle(ctx context.Context, user string, since time.Time) ([]byte, error) {
	for attempt := range settleAttempts {
		if attempt > 0 {
			if err := ddb.Pause(ctx, attempt); err != nil {
				return nil, err
			}
			// Someone stored it first, or changed the legacy copy.
			stored, ok, err := p.read(ctx, p.Table, p.key(user))
			if err != nil || ok {
				return stored, err
			}
		}
		var legacy []byte
		if p.Legacy != "" {
			var err error
			if legacy, _, err = p.read(ctx, p.Legacy, p.legacyKey(user)); err != nil {
				return nil, err
			}
		}
		secret := legacy
		if secret == nil {
			secret = make([]byte, secretBytes)
			if _, err := rand.Read(secret); err != nil {
				return nil, fmt.Errorf("analytics: new secret: %w", err)
			}
		}
		switch stored, err := p.store(ctx, user, since, secret, legacy != nil); {
		case err != nil:
			return nil, err
		case stored == stateErased:
			return nil, nil
		case stored == stateStored:
			return secret, nil
		}
	}
	// The user id stays out of errors, which end up in logs.
	return nil, errors.New("analytics: a user's secret kept changing under concurrent writers")
}

type storeState int

const (
	stateLost storeState = iota // a concurrent write came first
	stateStored
	stateErased
)

// store puts secret in Table unless the user has one there already, in one
// transaction with the erasure guard and, when moved is set, with removing
// the same secret from the user's Players item.
func (p *Pseudonyms) store(ctx context.Context, user string, since time.Time, secret []byte, moved bool) (storeState, error) {
	var items []types.TransactWriteItem
	if p.Guard != nil {
		items = append(items, p.Guard.Unerased(ctx, user, since)...)
	}
	guards := len(items)
	absent := ddb.MustBuild(expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(schema.AttrUserID))))
	items = append(items, types.TransactWriteItem{Put: ddb.TransactPut(p.Table, map[string]types.AttributeValue{
		schema.AttrUserID: ddb.S(user),
		SecretAttr:        &types.AttributeValueMemberB{Value: secret},
	}, absent)})
	if moved {
		attr := expression.Name(SecretAttr)
		removed := ddb.MustBuild(expression.NewBuilder().
			WithUpdate(expression.Remove(attr)).
			WithCondition(attr.Equal(expression.Value(secret))))
		items = append(items, types.TransactWriteItem{Update: ddb.TransactUpdate(p.Legacy, p.legacyKey(user), removed)})
	}
	_, err := p.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return stateStored, nil
	}
	if failed, ok := ddb.CancelledBy(err); ok {
		if slices.ContainsFunc(failed, func(i int) bool { return i < guards }) {
			return stateErased, nil
		}
		// A condition failed or a concurrent transaction conflicted: look
		// again.
		return stateLost, nil
	}
	return stateLost, fmt.Errorf("analytics: store a secret: %w", err)
}

// read returns the secret kept in a table's item; ok is false when it has
// none. It reads that one attribute only (the analytics shipper may read
// no other of a Players item).
func (p *Pseudonyms) read(ctx context.Context, table string, key map[string]types.AttributeValue) ([]byte, bool, error) {
	projection := ddb.MustBuild(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(SecretAttr))))
	out, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true),
		ProjectionExpression: projection.Projection(), ExpressionAttributeNames: projection.Names(),
	})
	if err != nil {
		return nil, false, fmt.Errorf("analytics: read a secret: %w", err)
	}
	return secretOf(out.Item)
}

// secretOf reads the secret of an item; ok is false when it has none.
func secretOf(item map[string]types.AttributeValue) ([]byte, bool, error) {
	switch v := item[SecretAttr].(type) {
	case nil:
		return nil, false, nil
	case *types.AttributeValueMemberB:
		if len(v.Value) != secretBytes {
			return nil, false, fmt.Errorf("analytics: a user's %s has %d bytes, want %d", SecretAttr, len(v.Value), secretBytes)
		}
		return v.Value, true, nil
	default:
		return nil, false, fmt.Errorf("analytics: a user's %s is a %T, not binary", SecretAttr, v)
	}
}

// PID is the hex of HMAC-SHA256(secret, user), cut to 128 bits: what an
// event carries as user_pid.
func PID(secret []byte, user string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(user))
	return hex.EncodeToString(mac.Sum(nil))[:pidHexLen]
}

// Eraser is the analytics part of an erasure: it deletes the user's
// secret, and with it every way to compute the PID their exported events
// carry (crypto-shredding), without rewriting the export. A secret still
// kept in the user's Players item goes with that item (players.Eraser).
type Eraser struct {
	DB ddb.DB
	// Table is the AnalyticsSecrets table (physical name).
	Table string
}

// Name names the part in logs and metrics.
func (e *Eraser) Name() string { return "analytics_secret" }

// Erase deletes the user's secret; deleting a missing one is not an error.
func (e *Eraser) Erase(ctx context.Context, user string) (bool, error) {
	_, err := e.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(e.Table), Key: map[string]types.AttributeValue{schema.AttrUserID: ddb.S(user)},
	})
	if err != nil {
		return false, fmt.Errorf("analytics: delete a secret: %w", err)
	}
	return true, nil
}

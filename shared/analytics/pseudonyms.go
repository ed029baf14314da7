package analytics

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
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
	// inFlight bounds the concurrent DynamoDB calls of one step of a
	// batch: reading or storing secrets, reading or writing markers.
	inFlight = 16
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
//
// A batch of new players costs a few calls, not a few per player: the
// secrets are read 100 users a call, the legacy copies of those without
// one likewise, and the missing secrets are stored many users to a
// transaction (each user's put beside that user's own erasure guard), the
// calls running concurrently. Secrets are not kept across calls: a cache
// could only spare the read by trusting a secret the Eraser may have
// deleted since.
func (p *Pseudonyms) PIDsSince(ctx context.Context, since map[string]time.Time) (map[string]string, error) {
	users := make([]string, 0, len(since))
	for u := range since {
		if u != "" {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return map[string]string{}, nil
	}
	slices.Sort(users)
	secrets, err := p.readAll(ctx, p.Table, schema.AttrUserID, users)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, u := range users {
		if secrets[u] == nil {
			missing = append(missing, u)
		}
	}
	if len(missing) > 0 {
		created, err := p.create(ctx, missing, since)
		if err != nil {
			return nil, err
		}
		maps.Copy(secrets, created)
	}
	pids := make(map[string]string, len(users))
	for _, u := range users {
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

// readAll reads the secrets users have in table (keyed by keyAttr), 100
// users a call, the calls running concurrently. A user with none is absent
// from the result.
func (p *Pseudonyms) readAll(ctx context.Context, table, keyAttr string, users []string) (map[string][]byte, error) {
	var mu sync.Mutex
	secrets := make(map[string][]byte, len(users))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for chunk := range slices.Chunk(users, ddb.MaxBatchGet) {
		g.Go(func() error {
			keys := make([]map[string]types.AttributeValue, len(chunk))
			for i, u := range chunk {
				keys[i] = map[string]types.AttributeValue{keyAttr: ddb.S(u)}
			}
			items, err := ddb.BatchGet(gctx, p.DB, table, keys, true, keyAttr, SecretAttr)
			if err != nil {
				return fmt.Errorf("analytics: read secrets: %w", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, it := range items {
				id, ok := it[keyAttr].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				secret, ok, err := secretOf(it)
				if err != nil {
					return err
				}
				if ok {
					secrets[id.Value] = secret
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return secrets, nil
}

// claim is one user's secret on its way into Table, moved from Players or
// new, and the transaction items that store it, guarded.
type claim struct {
	user   string
	secret []byte
	moved  bool
	items  []types.TransactWriteItem
}

// create stores a secret for each of users, who had none in Table when it
// was read: their legacy secret, moved, or a new one. It returns the
// secrets stored or found stored; an erased user is absent.
//
// The claims go into transactions as many as ddb.MaxTransact items hold.
// When DynamoDB cancels one, the users whose own items failed (erased, or
// a concurrent shipper stored their secret first) are settled one at a
// time, as a lone user always was; the others, held up only by sharing
// their transaction, are tried again together.
func (p *Pseudonyms) create(ctx context.Context, users []string, since map[string]time.Time) (map[string][]byte, error) {
	legacy := map[string][]byte{}
	if p.Legacy != "" {
		var err error
		if legacy, err = p.readAll(ctx, p.Legacy, schema.AttrPlayerID, users); err != nil {
			return nil, err
		}
	}
	pending := make([]claim, len(users))
	for i, u := range users {
		secret, moved := legacy[u], legacy[u] != nil
		if !moved {
			var err error
			if secret, err = newSecret(); err != nil {
				return nil, err
			}
		}
		pending[i] = claim{user: u, secret: secret, moved: moved}
	}

	var (
		mu        sync.Mutex
		secrets   = make(map[string][]byte, len(users))
		unsettled []string
	)
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == settleAttempts {
			for _, c := range pending {
				unsettled = append(unsettled, c.user)
			}
			break
		}
		// The guard's items are made afresh for each attempt, as a lone
		// user's are, so they follow the erasure key's versions.
		for i, c := range pending {
			pending[i].items, _ = p.storeItems(ctx, c.user, since[c.user], c.secret, c.moved)
		}
		var again []claim
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(inFlight)
		for _, group := range transactions(pending) {
			g.Go(func() error {
				stored, lone, rest, err := p.storeAll(gctx, group)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if stored {
					for _, c := range group {
						secrets[c.user] = c.secret
					}
				}
				for _, c := range lone {
					unsettled = append(unsettled, c.user)
				}
				again = append(again, rest...)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		pending = again
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for _, u := range unsettled {
		g.Go(func() error {
			secret, err := p.settle(gctx, u, since[u])
			if err != nil || secret == nil {
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
	return secrets, nil
}

// transactions splits claims, in order, into groups whose items fit one
// transaction.
func transactions(claims []claim) [][]claim {
	var (
		groups [][]claim
		start  int
		items  int
	)
	for i, c := range claims {
		if items+len(c.items) > ddb.MaxTransact {
			groups, start, items = append(groups, claims[start:i]), i, 0
		}
		items += len(c.items)
	}
	return append(groups, claims[start:])
}

// storeAll stores the secrets of group in one transaction. When DynamoDB
// cancels it, lone are the claims with an item that failed, to be settled
// one at a time, and rest the others; a cancellation that names no item
// makes every claim lone.
func (p *Pseudonyms) storeAll(ctx context.Context, group []claim) (stored bool, lone, rest []claim, err error) {
	var items []types.TransactWriteItem
	owner := make([]int, 0, ddb.MaxTransact)
	for i, c := range group {
		items = append(items, c.items...)
		for range c.items {
			owner = append(owner, i)
		}
	}
	_, err = p.DB.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return true, nil, nil, nil
	}
	failed, cancelled := ddb.CancelledBy(err)
	if !cancelled {
		return false, nil, nil, fmt.Errorf("analytics: store secrets: %w", err)
	}
	if len(failed) == 0 {
		return false, group, nil, nil
	}
	alone := make([]bool, len(group))
	for _, i := range failed {
		alone[owner[i]] = true
	}
	for i, c := range group {
		if alone[i] {
			lone = append(lone, c)
		} else {
			rest = append(rest, c)
		}
	}
	return false, lone, rest, nil
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
			var err error
			if secret, err = newSecret(); err != nil {
				return nil, err
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
	items, guards := p.storeItems(ctx, user, since, secret, moved)
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

// storeItems are the transaction items that store one user's secret: the
// erasure guard's checks (the first guards items), the put into Table
// unless the user has a secret there already, and, when moved is set, the
// removal of the same secret from the user's Players item.
func (p *Pseudonyms) storeItems(ctx context.Context, user string, since time.Time, secret []byte, moved bool) (items []types.TransactWriteItem, guards int) {
	if p.Guard != nil {
		items = append(items, p.Guard.Unerased(ctx, user, since)...)
	}
	guards = len(items)
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
	return items, guards
}

// newSecret is a new user's secret.
func newSecret() ([]byte, error) {
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("analytics: new secret: %w", err)
	}
	return secret, nil
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

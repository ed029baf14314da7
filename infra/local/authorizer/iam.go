package authorizer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4 constants of the local stack: the service and region a signature
// must be scoped to, and the account the local user belongs to.
const (
	Service   = "execute-api"
	Region    = "us-east-1"
	AccountID = "000000000000"
	// MaxSkew is how far X-Amz-Date may be from the real time.
	MaxSkew = 5 * time.Minute
)

// User is a local IAM user with long-term credentials.
type User struct {
	// Name is the user's name, the end of its ARN.
	Name                string
	AccessKeyID, Secret string
}

// ARN is how the user's signatures are described to functions:
// arn:aws:iam::ACCOUNT:user/NAME.
func (u User) ARN() string { return UserARN(u.Name) }

// UserARN is the ARN of the local user named name.
func UserARN(name string) string { return "arn:aws:iam::" + AccountID + ":user/" + name }

// IAM is IAM authorization for the service routes: a request must carry a
// valid SigV4 signature made with a known access key: a local user's, or
// a role session's minted by AssumeRole (with its session token). Each is
// described to the function as API Gateway describes it.
type IAM struct {
	mu   sync.Mutex
	keys map[string]identity // access key id → who holds it
	now  func() time.Time
}

// identity is what one access key signs as.
type identity struct {
	secret string
	// token and expires are a role session's; a user has neither.
	token   string
	expires time.Time
	desc    events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription
}

// NewIAM accepts signatures made with the credentials of users, and
// those of role sessions AssumeRole mints.
func NewIAM(users ...User) *IAM {
	a := &IAM{keys: map[string]identity{}, now: time.Now}
	for _, u := range users {
		sum := sha256.Sum256([]byte(u.ARN()))
		id := "AIDA" + strings.ToUpper(hex.EncodeToString(sum[:8]))
		a.keys[u.AccessKeyID] = identity{secret: u.Secret, desc: events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccessKey: u.AccessKeyID,
			AccountID: AccountID,
			CallerID:  id,
			UserARN:   u.ARN(),
			UserID:    id,
		}}
	}
	return a
}

// RoleCredentials are a role session's temporary credentials, as STS
// AssumeRole returns them.
type RoleCredentials struct {
	AccessKeyID     string    `json:"access_key_id"`
	SecretAccessKey string    `json:"secret_access_key"`
	SessionToken    string    `json:"session_token"`
	Expiration      time.Time `json:"expiration"`
	// AssumedRoleARN is how the session is described to functions:
	// arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION.
	AssumedRoleARN string `json:"assumed_role_arn"`
}

var (
	localRoleARN = regexp.MustCompile(`^arn:aws:iam::` + AccountID + `:role/(?:[\w+=,.@-]+/)*([\w+=,.@-]{1,64})$`)
	sessionName  = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)
)

// MaxSession bounds a role session's lifetime, as a role's default maximum
// session duration does.
const MaxSession = 12 * time.Hour

// AssumeRole mints credentials of a session of role (any role of the local
// account: there is no IAM to say which exist, and whether the role may
// call Rally is the functions' allow-list to decide), valid for ttl (1 h
// when 0).
func (a *IAM) AssumeRole(role, session string, ttl time.Duration) (RoleCredentials, error) {
	m := localRoleARN.FindStringSubmatch(role)
	if m == nil {
		return RoleCredentials{}, fmt.Errorf("role_arn %q is not a role of the local account (arn:aws:iam::%s:role/[path/]NAME)", role, AccountID)
	}
	if !sessionName.MatchString(session) {
		return RoleCredentials{}, fmt.Errorf("session %q must be 2-64 characters of letters, digits and +=,.@_-", session)
	}
	if ttl == 0 {
		ttl = time.Hour
	}
	if ttl < 15*time.Minute || ttl > MaxSession {
		return RoleCredentials{}, fmt.Errorf("a session lasts 15m to %s, not %s", MaxSession, ttl)
	}
	name := m[1]
	sum := sha256.Sum256([]byte(role))
	roleID := "AROA" + strings.ToUpper(hex.EncodeToString(sum[:9]))
	creds := RoleCredentials{
		AccessKeyID:     "ASIA" + strings.ToUpper(randomHex(8)),
		SecretAccessKey: randomHex(20),
		SessionToken:    randomHex(48),
		Expiration:      a.now().Add(ttl).UTC().Truncate(time.Second),
		AssumedRoleARN:  "arn:aws:sts::" + AccountID + ":assumed-role/" + name + "/" + session,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys[creds.AccessKeyID] = identity{
		secret: creds.SecretAccessKey, token: creds.SessionToken, expires: creds.Expiration,
		desc: events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccessKey: creds.AccessKeyID,
			AccountID: AccountID,
			CallerID:  roleID + ":" + session,
			UserARN:   creds.AssumedRoleARN,
			UserID:    roleID + ":" + session,
		},
	}
	return creds, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Authorize verifies the SigV4 signature (see Verifier), scoped to
// execute-api in us-east-1, and describes its signer as API Gateway does.
func (a *IAM) Authorize(r *http.Request, body []byte) (*Description, error) {
	var who identity
	v := Verifier{
		Key: func(accessKey string) (SigningKey, bool) {
			a.mu.Lock()
			defer a.mu.Unlock()
			var known bool
			who, known = a.keys[accessKey]
			return SigningKey{Secret: who.secret, Token: who.token, Expires: who.expires}, known
		},
		Scope: func(region, service string) error {
			if service != Service || region != Region {
				return fmt.Errorf("credential should be scoped to %s/%s, not %s/%s", Region, Service, region, service)
			}
			return nil
		},
		Now: a.now,
	}
	if _, err := v.Verify(r, body); err != nil {
		var refused *SignatureError
		errors.As(err, &refused)
		switch refused.Code {
		case "MissingAuthenticationTokenException":
			return nil, forbidden("missing Authentication Token: sign the request with SigV4 (service execute-api, region us-east-1)")
		case "IncompleteSignatureException":
			if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
				return nil, forbidden("the Authorization header is not a SigV4 signature (AWS4-HMAC-SHA256); service routes use IAM authorization, not tokens")
			}
		}
		return nil, forbidden(refused.Reason)
	}
	desc := who.desc
	return &Description{IAM: &desc}, nil
}

func forbidden(reason string) *Denied { return &Denied{Kind: ErrForbidden, Reason: reason} }

// Sign signs req for execute-api in us-east-1 at the given time, as an AWS
// SDK or curl --aws-sigv4 would; body must be what will be sent.
func Sign(req *http.Request, body []byte, accessKeyID, secret string, at time.Time) error {
	return SignWith(req, body, aws.Credentials{AccessKeyID: accessKeyID, SecretAccessKey: secret}, at)
}

// SignWith is Sign with any credentials, a role session's included (its
// token goes in X-Amz-Security-Token, signed).
func SignWith(req *http.Request, body []byte, creds aws.Credentials, at time.Time) error {
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, req, hex.EncodeToString(sum[:]), Service, Region, at); err != nil {
		return fmt.Errorf("authorizer: sign request: %w", err)
	}
	return nil
}

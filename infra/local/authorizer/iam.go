package authorizer

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
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

// UserARN is the local user whose long-term credentials the stack accepts
// (RALLY_LOCAL_ACCESS_KEY_ID / RALLY_LOCAL_SECRET_ACCESS_KEY).
const UserARN = "arn:aws:iam::" + AccountID + ":user/rallylocal"

// IAM is IAM authorization for the service routes: a request must carry a
// valid SigV4 signature made with a known access key: the local user's, or
// a role session's minted by AssumeRole (with its session token). Each is
// described to the function as API Gateway describes it.
type IAM struct {
	mu     sync.Mutex
	keys   map[string]identity // access key id → who holds it
	now    func() time.Time
	signer *v4.Signer
}

// identity is what one access key signs as.
type identity struct {
	secret string
	// token and expires are a role session's; a user has neither.
	token   string
	expires time.Time
	desc    events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription
}

// NewIAM accepts signatures made with accessKeyID/secret, the credentials
// of the local user "rallylocal", and those of role sessions AssumeRole
// mints.
func NewIAM(accessKeyID, secret string) *IAM {
	return &IAM{
		keys: map[string]identity{accessKeyID: {secret: secret, desc: events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			AccessKey: accessKeyID,
			AccountID: AccountID,
			CallerID:  "AIDALOCALRALLYUSER01",
			UserARN:   UserARN,
			UserID:    "AIDALOCALRALLYUSER01",
		}}},
		now:    time.Now,
		signer: v4.NewSigner(),
	}
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

// Authorize verifies the SigV4 signature by recomputing it with the SDK's
// signer over the headers the client signed, the query string and the body.
func (a *IAM) Authorize(r *http.Request, body []byte) (*Description, error) {
	authz := r.Header.Get("Authorization")
	if authz == "" {
		return nil, forbidden("missing Authentication Token: sign the request with SigV4 (service execute-api, region us-east-1)")
	}
	const algorithm = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(authz, algorithm) {
		return nil, forbidden("the Authorization header is not a SigV4 signature (AWS4-HMAC-SHA256); service routes use IAM authorization, not tokens")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(authz[len(algorithm):], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			fields[k] = v
		}
	}
	cred, signedHeaders, signature := fields["Credential"], fields["SignedHeaders"], fields["Signature"]
	if cred == "" || signedHeaders == "" || signature == "" {
		return nil, forbidden("the Authorization header needs Credential, SignedHeaders and Signature")
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return nil, forbidden("malformed Credential " + cred)
	}
	accessKey, day, region, service := scope[0], scope[1], scope[2], scope[3]
	a.mu.Lock()
	who, known := a.keys[accessKey]
	a.mu.Unlock()
	if !known {
		return nil, forbidden("the security token included in the request is invalid (unknown access key " + accessKey + ")")
	}
	token := r.Header.Get("X-Amz-Security-Token")
	switch {
	case who.token == "" && token != "":
		return nil, forbidden("the security token included in the request is invalid (the local user has no session tokens)")
	case who.token != "" && !hmac.Equal([]byte(token), []byte(who.token)):
		return nil, forbidden("the security token included in the request is invalid")
	case who.token != "" && !a.now().Before(who.expires):
		return nil, forbidden("the security token included in the request is expired")
	}
	secret := who.secret
	if service != Service || region != Region {
		return nil, forbidden(fmt.Sprintf("credential should be scoped to %s/%s, not %s/%s", Region, Service, region, service))
	}
	signedAt, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return nil, forbidden("the X-Amz-Date header is missing or not in the form 20060102T150405Z")
	}
	if now := a.now(); signedAt.Before(now.Add(-MaxSkew)) || signedAt.After(now.Add(MaxSkew)) {
		return nil, forbidden(fmt.Sprintf("signature expired: %s is more than %s from now (%s)",
			signedAt.Format(time.RFC3339), MaxSkew, now.UTC().Format(time.RFC3339)))
	}
	if day != signedAt.Format("20060102") {
		return nil, forbidden("the Credential date does not match X-Amz-Date")
	}
	names := strings.Split(signedHeaders, ";")
	if !slices.Contains(names, "host") {
		return nil, forbidden("the host header must be signed")
	}

	want, err := a.recompute(r, body, names, aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secret}, signedAt)
	if err != nil {
		return nil, forbidden("cannot verify the signature: " + err.Error())
	}
	if want.signedHeaders != signedHeaders {
		return nil, forbidden(fmt.Sprintf("signed headers %q cannot be verified (expected %q)", signedHeaders, want.signedHeaders))
	}
	if !hmac.Equal([]byte(want.signature), []byte(signature)) {
		return nil, forbidden("the request signature we calculated does not match the signature you provided; check your secret access key and signing method")
	}
	desc := who.desc
	return &Description{IAM: &desc}, nil
}

type sigv4 struct{ signedHeaders, signature string }

// recompute signs a copy of the request that holds exactly the headers the
// client signed, so the SDK signer covers the same set.
func (a *IAM) recompute(r *http.Request, body []byte, names []string, creds aws.Credentials, at time.Time) (sigv4, error) {
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	c, err := http.NewRequestWithContext(context.Background(), r.Method, u.String(), nil)
	if err != nil {
		return sigv4{}, err
	}
	c.URL = u
	c.Host = r.Host
	for _, n := range names {
		switch n {
		case "host":
		case "content-length":
			c.ContentLength = int64(len(body))
		default:
			for _, v := range r.Header.Values(n) {
				c.Header.Add(n, v)
			}
		}
	}
	sum := sha256.Sum256(body)
	if err := a.signer.SignHTTP(context.Background(), creds, c, hex.EncodeToString(sum[:]), Service, Region, at); err != nil {
		return sigv4{}, err
	}
	var out sigv4
	for _, part := range strings.Split(strings.TrimPrefix(c.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "SignedHeaders":
			out.signedHeaders = v
		case "Signature":
			out.signature = v
		}
	}
	return out, nil
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

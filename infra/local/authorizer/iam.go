package authorizer

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
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

// IAM is IAM authorization for the service routes: a request must carry a
// valid SigV4 signature made with a known access key.
type IAM struct {
	keys    map[string]string // access key id → secret
	userARN string
	now     func() time.Time
	signer  *v4.Signer
}

// NewIAM accepts signatures made with accessKeyID/secret, the credentials
// of the local user "rallylocal".
func NewIAM(accessKeyID, secret string) *IAM {
	return &IAM{
		keys:    map[string]string{accessKeyID: secret},
		userARN: "arn:aws:iam::" + AccountID + ":user/rallylocal",
		now:     time.Now,
		signer:  v4.NewSigner(),
	}
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
	secret, known := a.keys[accessKey]
	if !known {
		return nil, forbidden("the security token included in the request is invalid (unknown access key " + accessKey + ")")
	}
	if r.Header.Get("X-Amz-Security-Token") != "" {
		return nil, forbidden("the security token included in the request is invalid (the local user has no session tokens)")
	}
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
	return &Description{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
		AccessKey: accessKey,
		AccountID: AccountID,
		CallerID:  "AIDALOCALRALLYUSER01",
		UserARN:   a.userARN,
		UserID:    "AIDALOCALRALLYUSER01",
	}}, nil
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
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: accessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, req, hex.EncodeToString(sum[:]), Service, Region, at); err != nil {
		return fmt.Errorf("authorizer: sign request: %w", err)
	}
	return nil
}

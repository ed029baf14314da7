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

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigningKey is what one access key signs with: its secret and, for a
// session, its token and expiry.
type SigningKey struct {
	Secret string
	// Token and Expires are a session's; long-term keys have neither (a
	// zero Expires never expires).
	Token   string
	Expires time.Time
}

// Signature is what a verified SigV4 signature names: the access key that
// made it and the region and service it is scoped to.
type Signature struct {
	AccessKey, Region, Service string
}

// SignatureError says why a signature was refused, with the error code
// AWS services answer it with.
type SignatureError struct {
	// Code: MissingAuthenticationTokenException, IncompleteSignatureException,
	// UnrecognizedClientException, ExpiredTokenException or
	// InvalidSignatureException.
	Code   string
	Reason string
}

func (e *SignatureError) Error() string { return e.Code + ": " + e.Reason }

// Verifier verifies SigV4 signatures by recomputing them with the SDK's
// signer over the headers the client signed, the query string and the body.
type Verifier struct {
	// Key finds the signing key of an access key.
	Key func(accessKey string) (SigningKey, bool)
	// Scope accepts or refuses the region and service a signature is
	// scoped to, with the reason.
	Scope func(region, service string) error
	// Now is the time signatures are checked against (default time.Now).
	Now func() time.Time
}

// Verify checks r's SigV4 signature over body; err is a *SignatureError.
func (v Verifier) Verify(r *http.Request, body []byte) (Signature, error) {
	refuse := func(code, reason string) (Signature, error) {
		return Signature{}, &SignatureError{Code: code, Reason: reason}
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	authz := r.Header.Get("Authorization")
	if authz == "" {
		return refuse("MissingAuthenticationTokenException", "missing Authentication Token: sign the request with SigV4")
	}
	const algorithm = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(authz, algorithm) {
		return refuse("IncompleteSignatureException", "the Authorization header is not a SigV4 signature (AWS4-HMAC-SHA256)")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(authz[len(algorithm):], ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			fields[k] = val
		}
	}
	cred, signedHeaders, signature := fields["Credential"], fields["SignedHeaders"], fields["Signature"]
	if cred == "" || signedHeaders == "" || signature == "" {
		return refuse("IncompleteSignatureException", "the Authorization header needs Credential, SignedHeaders and Signature")
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return refuse("IncompleteSignatureException", "malformed Credential "+cred)
	}
	sig := Signature{AccessKey: scope[0], Region: scope[2], Service: scope[3]}
	day := scope[1]
	key, known := v.Key(sig.AccessKey)
	if !known {
		return refuse("UnrecognizedClientException", "the security token included in the request is invalid (unknown access key "+sig.AccessKey+")")
	}
	token := r.Header.Get("X-Amz-Security-Token")
	switch {
	case key.Token == "" && token != "":
		return refuse("UnrecognizedClientException", "the security token included in the request is invalid (these credentials have no session token)")
	case key.Token != "" && !hmac.Equal([]byte(token), []byte(key.Token)):
		return refuse("UnrecognizedClientException", "the security token included in the request is invalid")
	case !key.Expires.IsZero() && !now().Before(key.Expires):
		return refuse("ExpiredTokenException", "the security token included in the request is expired")
	}
	if v.Scope != nil {
		if err := v.Scope(sig.Region, sig.Service); err != nil {
			return refuse("InvalidSignatureException", err.Error())
		}
	}
	signedAt, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return refuse("IncompleteSignatureException", "the X-Amz-Date header is missing or not in the form 20060102T150405Z")
	}
	if at := now(); signedAt.Before(at.Add(-MaxSkew)) || signedAt.After(at.Add(MaxSkew)) {
		return refuse("InvalidSignatureException", fmt.Sprintf("signature expired: %s is more than %s from now (%s)",
			signedAt.Format(time.RFC3339), MaxSkew, at.UTC().Format(time.RFC3339)))
	}
	if day != signedAt.Format("20060102") {
		return refuse("InvalidSignatureException", "the Credential date does not match X-Amz-Date")
	}
	names := strings.Split(signedHeaders, ";")
	if !slices.Contains(names, "host") {
		return refuse("InvalidSignatureException", "the host header must be signed")
	}
	want, err := recompute(r, body, names, aws.Credentials{AccessKeyID: sig.AccessKey, SecretAccessKey: key.Secret}, sig, signedAt)
	if err != nil {
		return refuse("InvalidSignatureException", "cannot verify the signature: "+err.Error())
	}
	if want.signedHeaders != signedHeaders {
		return refuse("InvalidSignatureException", fmt.Sprintf("signed headers %q cannot be verified (expected %q)", signedHeaders, want.signedHeaders))
	}
	if !hmac.Equal([]byte(want.signature), []byte(signature)) {
		return refuse("InvalidSignatureException", "the request signature we calculated does not match the signature you provided; check your secret access key and signing method")
	}
	return sig, nil
}

type sigv4 struct{ signedHeaders, signature string }

// recompute signs a copy of the request that holds exactly the headers the
// client signed, so the SDK signer covers the same set.
func recompute(r *http.Request, body []byte, names []string, creds aws.Credentials, sig Signature, at time.Time) (sigv4, error) {
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
			for _, val := range r.Header.Values(n) {
				c.Header.Add(n, val)
			}
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, c, hex.EncodeToString(sum[:]), sig.Service, sig.Region, at); err != nil {
		return sigv4{}, err
	}
	var out sigv4
	for _, part := range strings.Split(strings.TrimPrefix(c.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "), ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "SignedHeaders":
			out.signedHeaders = val
		case "Signature":
			out.signature = val
		}
	}
	return out, nil
}

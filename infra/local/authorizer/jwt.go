package authorizer

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"
)

// JWT is the local identity provider and the JWT authorizer of the player
// routes. The key pair is generated at start, so tokens do not outlive the
// stack that minted them.
type JWT struct {
	issuer   string
	audience []string
	key      *rsa.PrivateKey
	kid      string
	now      func() time.Time
}

// NewJWT creates an issuer whose tokens are accepted for any of audience.
func NewJWT(issuer string, audience ...string) (*JWT, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("authorizer: generate signing key: %w", err)
	}
	return &JWT{issuer: issuer, audience: audience, key: key, kid: thumbprint(&key.PublicKey), now: time.Now}, nil
}

// Issuer is the iss every token carries and the authorizer requires.
func (j *JWT) Issuer() string { return j.issuer }

// Audience lists the accepted audiences; the first is the default.
func (j *JWT) Audience() []string { return j.audience }

// KeyID is the kid of the signing key.
func (j *JWT) KeyID() string { return j.kid }

// TokenRequest asks for a token.
type TokenRequest struct {
	Subject string
	// TTL is the lifetime; 0 means one hour, negative mints an expired
	// token (to exercise a client's refresh path).
	TTL time.Duration
	// Audience defaults to the first accepted audience.
	Audience string
	// Scope is a space-separated OAuth scope list, optional.
	Scope string
}

// Mint signs a token for req and returns it with its expiry.
func (j *JWT) Mint(req TokenRequest) (string, time.Time, error) {
	ttl := req.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	aud := req.Audience
	if aud == "" && len(j.audience) > 0 {
		aud = j.audience[0]
	}
	now := j.now().Truncate(time.Second)
	exp := now.Add(ttl)
	iat := now
	if ttl < 0 {
		// An expired token must not also look issued in the future.
		iat = exp.Add(-time.Minute)
	}
	claims := jwt.MapClaims{
		"iss": j.issuer, "sub": req.Subject, "aud": aud,
		"iat": iat.Unix(), "exp": exp.Unix(), "jti": randomID(),
		"token_use": "access",
	}
	if req.Scope != "" {
		claims["scope"] = req.Scope
	}
	tok, err := j.Sign(claims)
	return tok, exp, err
}

// Sign signs arbitrary claims with the issuer's key and kid, for tests that
// need tokens Mint would not make (not yet valid, wrong issuer, ...).
func (j *JWT) Sign(claims jwt.MapClaims) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = j.kid
	s, err := t.SignedString(j.key)
	if err != nil {
		return "", fmt.Errorf("authorizer: sign token: %w", err)
	}
	return s, nil
}

// JWK is one public key in a JWKS document.
type JWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// JWKS is the document served at the issuer's jwks_uri.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWKS returns the public keys tokens are verified against.
func (j *JWT) JWKS() JWKS {
	pub := &j.key.PublicKey
	return JWKS{Keys: []JWK{{
		Kty: "RSA", Kid: j.kid, Use: "sig", Alg: "RS256",
		N: b64(pub.N.Bytes()), E: b64(big.NewInt(int64(pub.E)).Bytes()),
	}}}
}

// Authorize validates the bearer token the way the HTTP API JWT authorizer
// does: token from the Authorization header (with or without "Bearer "),
// an RSA signature by a key in the JWKS named by kid, iss, aud (or
// client_id when aud is absent), exp, nbf and iat.
func (j *JWT) Authorize(r *http.Request, _ []byte) (*Description, error) {
	raw := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(raw) > 7 && strings.EqualFold(raw[:7], "bearer ") {
		raw = strings.TrimSpace(raw[7:])
	}
	if raw == "" {
		return nil, &Denied{Kind: ErrUnauthorized, Reason: "no token in the Authorization header", Challenge: `Bearer`}
	}
	token, err := jwt.Parse(raw, j.keyFor,
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512"}),
		jwt.WithIssuer(j.issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithJSONNumber(),
		jwt.WithTimeFunc(j.now),
	)
	if err != nil {
		return nil, invalidToken(describe(err))
	}
	claims := token.Claims.(jwt.MapClaims)
	if !j.audienceMatches(claims) {
		return nil, invalidToken("the token does not have a valid audience")
	}
	out := &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{}}
	for k, v := range claims {
		out.Claims[k] = claimString(v)
	}
	out.Scopes = scopes(claims)
	return &Description{JWT: out}, nil
}

func invalidToken(reason string) *Denied {
	return &Denied{
		Kind: ErrUnauthorized, Reason: reason,
		Challenge: fmt.Sprintf(`Bearer scope="" error="invalid_token" error_description=%q`, reason),
	}
}

func (j *JWT) keyFor(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, fmt.Errorf("the token has no kid")
	}
	if kid != j.kid {
		return nil, fmt.Errorf("no key in the JWKS has kid %q", kid)
	}
	return &j.key.PublicKey, nil
}

func describe(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "the token is malformed"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "the token's signing key is not in the JWKS (kid)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "the token signature is invalid"
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "the token has expired or has no exp claim"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "the token is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "the token was issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "the token does not have a valid issuer"
	}
	return "the token is invalid: " + err.Error()
}

func (j *JWT) audienceMatches(c jwt.MapClaims) bool {
	var got []string
	if _, ok := c["aud"]; ok {
		aud, err := c.GetAudience()
		if err != nil {
			return false
		}
		got = aud
	} else if id, ok := c["client_id"].(string); ok {
		got = []string{id}
	}
	for _, g := range got {
		for _, want := range j.audience {
			if g == want {
				return true
			}
		}
	}
	return false
}

// claimString renders a claim the way API Gateway passes claims to Lambda:
// every value a string, arrays as "[a b]".
func claimString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = claimString(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func scopes(c jwt.MapClaims) []string {
	if s, ok := c["scope"].(string); ok && s != "" {
		return strings.Fields(s)
	}
	if list, ok := c["scp"].([]any); ok {
		var out []string
		for _, e := range list {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// thumbprint is the RFC 7638 JWK thumbprint, a stable kid for the key.
func thumbprint(pub *rsa.PublicKey) string {
	doc := fmt.Sprintf(`{"e":%q,"kty":"RSA","n":%q}`, b64(big.NewInt(int64(pub.E)).Bytes()), b64(pub.N.Bytes()))
	sum := sha256.Sum256([]byte(doc))
	return b64(sum[:])
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b64(b)
}

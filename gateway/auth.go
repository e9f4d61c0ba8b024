package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// ErrUnauthenticated is wrapped by Authenticator errors when a request
// carries no credentials or credentials that do not verify. The gateway
// answers it with 401 and a WWW-Authenticate: Bearer challenge.
var ErrUnauthenticated = errors.New("unauthenticated")

// Authenticator turns a bearer token into the user it authenticates (the
// token's subject). It returns an error wrapping ErrUnauthenticated when
// the token is not valid.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (subject string, err error)
}

// MaxSubject bounds a user subject in bytes: 256. Longer subjects are
// refused as unauthenticated (a subject names a KV key and is recorded on
// every answer).
const MaxSubject = 256

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// StaticTokens authenticates fixed development tokens: a map of token to
// subject. Comparison is in constant time per token.
type StaticTokens map[string]string

// Authenticate returns the subject of token, or ErrUnauthenticated.
func (s StaticTokens) Authenticate(_ context.Context, token string) (string, error) {
	for t, sub := range s {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return sub, nil
		}
	}
	return "", fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}

// LoadStaticTokens reads a static-token file: one "token subject" pair a
// line, separated by white space; blank lines and lines starting with '#'
// are ignored. A token must be at least 16 characters; a subject at most
// MaxSubject bytes. The error names the file, the line and the rule.
func LoadStaticTokens(path string) (StaticTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening token file: %w", err)
	}
	defer f.Close()
	return ParseStaticTokens(path, f)
}

// ParseStaticTokens is LoadStaticTokens over a reader; name is used in
// errors.
func ParseStaticTokens(name string, r io.Reader) (StaticTokens, error) {
	out := StaticTokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		switch {
		case len(fields) != 2:
			return nil, fmt.Errorf("%s:%d: want \"token subject\", got %d fields", name, n, len(fields))
		case len(fields[0]) < 16:
			return nil, fmt.Errorf("%s:%d: token must be at least 16 characters", name, n)
		case len(fields[1]) > MaxSubject:
			return nil, fmt.Errorf("%s:%d: subject must be at most %d bytes", name, n, MaxSubject)
		case jwtTag.MatchString(fields[1]):
			return nil, fmt.Errorf("%s:%d: subject must not end in @jwt-<12 hex digits>: that names a JWT issuer's user (JWTUser)", name, n)
		}
		if _, dup := out[fields[0]]; dup {
			return nil, fmt.Errorf("%s:%d: token listed twice", name, n)
		}
		out[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tokens", name)
	}
	return out, nil
}

// JWTConfig configures JWT bearer verification.
type JWTConfig struct {
	// Issuer is the required "iss" claim. Required.
	Issuer string
	// Audience is the required "aud" value. Required.
	Audience string
	// JWKSURL is where the signing keys are fetched (and re-fetched when a
	// token names an unknown key ID). Required.
	JWKSURL string
	// ClockSkew is how long after "exp" a token is still accepted.
	// Optional. Default: 1 minute. ("nbf" gets go-oidc's fixed 5 minutes
	// plus ClockSkew.)
	ClockSkew time.Duration
	// Algorithms allowed to sign tokens. Optional. Default: RS256, ES256.
	Algorithms []string
}

// JWT verifies bearer JWTs with github.com/coreos/go-oidc/v3: signature
// against the JWKS, issuer, audience, expiry with clock skew. The user it
// authenticates is JWTUser(issuer, sub).
type JWT struct {
	v      *oidc.IDTokenVerifier
	issuer string
}

// jwtTag matches the end of a JWT user's name (JWTUser).
var jwtTag = regexp.MustCompile(`@jwt-[0-9a-f]{12}$`)

// JWTUser is the gateway's name of the user sub of JWT issuer:
// "<sub>@jwt-<the first 12 hex digits of SHA-256(issuer)>". Identities
// from different issuers never collide: a token-file user (StaticTokens,
// whose subjects may not end so) and users of two issuers with the same
// sub are three users, each with their own threads. The name is the
// owner recorded with the processor (onBehalfOf) and in the gateway's
// claims, shares and answers.
func JWTUser(issuer, sub string) string {
	sum := sha256.Sum256([]byte(issuer))
	return sub + "@jwt-" + hex.EncodeToString(sum[:6])
}

// NewJWT returns a JWT verifier. ctx bounds nothing but is kept by
// go-oidc for JWKS fetches (pass a long-lived context). It fails when a
// required field is missing.
func NewJWT(ctx context.Context, c JWTConfig) (*JWT, error) {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("jwt issuer: required"))
	}
	if c.Audience == "" {
		errs = append(errs, errors.New("jwt audience: required"))
	}
	if c.JWKSURL == "" {
		errs = append(errs, errors.New("jwt jwks url: required"))
	}
	if c.ClockSkew < 0 {
		errs = append(errs, errors.New("jwt clock skew: must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = time.Minute
	}
	algs := c.Algorithms
	if len(algs) == 0 {
		algs = []string{oidc.RS256, oidc.ES256}
	}
	skew := c.ClockSkew
	keys := oidc.NewRemoteKeySet(ctx, c.JWKSURL)
	v := oidc.NewVerifier(c.Issuer, keys, &oidc.Config{
		ClientID:             c.Audience,
		SupportedSigningAlgs: algs,
		// go-oidc compares exp with Now without leeway; checking against a
		// clock that runs ClockSkew behind accepts that much skew.
		Now: func() time.Time { return time.Now().Add(-skew) },
	})
	return &JWT{v: v, issuer: c.Issuer}, nil
}

// Authenticate verifies token and returns its user: JWTUser of the
// issuer and the "sub" claim.
func (j *JWT) Authenticate(ctx context.Context, token string) (string, error) {
	t, err := j.v.Verify(ctx, token)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	user := JWTUser(j.issuer, t.Subject)
	if t.Subject == "" || len(user) > MaxSubject {
		return "", fmt.Errorf("%w: sub claim must be 1-%d bytes", ErrUnauthenticated, MaxSubject-len(JWTUser(j.issuer, "")))
	}
	return user, nil
}

// sameIssuer completes the user name other, given by owner (a share),
// with owner's JWT issuer when other names none: a JWT user shares with
// "bob" of their own issuer. A token-file owner's names, and names that
// carry an issuer, are taken as given.
func sameIssuer(owner, other string) string {
	tag := jwtTag.FindString(owner)
	if tag == "" || jwtTag.MatchString(other) || len(other)+len(tag) > MaxSubject {
		return other
	}
	return other + tag
}

// Chain tries each Authenticator in order and returns the first subject.
type Chain []Authenticator

// Authenticate returns the first authenticator's subject that accepts
// token, or the last error.
func (c Chain) Authenticate(ctx context.Context, token string) (string, error) {
	err := fmt.Errorf("%w: no authenticator configured", ErrUnauthenticated)
	for _, a := range c {
		var sub string
		if sub, err = a.Authenticate(ctx, token); err == nil {
			return sub, nil
		}
	}
	return "", err
}

package server

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The PostgreSQL roles a token may map to (sql/tables/0002_roles.sql).
const (
	RoleProducer = "sluice_producer"
	RoleConsumer = "sluice_consumer"
	RoleAdmin    = "sluice_admin"
)

var roles = []string{RoleProducer, RoleConsumer, RoleAdmin}

// Principal is who makes a request: the PostgreSQL role its SQL runs under
// and the queues it may name.
type Principal struct {
	// Subject is the JWT's sub (required), or the static token's name
	// (unique in the tokens file); recorded with
	// each message sent as header "sluice_sub".
	Subject string
	// Role is one of RoleProducer, RoleConsumer, RoleAdmin; "" when
	// authentication is off (the SQL then runs as the server's own role).
	Role string
	// Queues are path.Match patterns of the queue names the principal may
	// use; none means every queue.
	Queues []string
	// key identifies the token for the concurrency limit.
	key string
	// expires is when the token expires (a JWT's exp), zero for none.
	expires time.Time
	// subHeaders are the headers of a message sent without any: the
	// sender alone (made by headers, once per request).
	subHeaders []byte
}

// Allows reports whether the principal may use queue.
func (p *Principal) Allows(queue string) bool {
	if len(p.Queues) == 0 {
		return true
	}
	for _, pat := range p.Queues {
		if ok, _ := path.Match(pat, queue); ok {
			return true
		}
	}
	return false
}

// AuthConfig says how requests are authenticated.
type AuthConfig struct {
	// Insecure turns authentication off: every request runs as the
	// server's own database role.
	Insecure bool
	// TokensFile is a JSON file of static tokens (see LoadTokens).
	TokensFile string
	// HS256Secret is the shared secret of HS256 JWTs (nil: none accepted).
	HS256Secret []byte
	// Ed25519Keys are the public keys of EdDSA JWTs.
	Ed25519Keys []ed25519.PublicKey
	// Audience, when set, must be in a JWT's aud.
	Audience string
}

// Enabled reports whether any way to authenticate is configured.
func (c *AuthConfig) Enabled() bool {
	return c.TokensFile != "" || len(c.HS256Secret) > 0 || len(c.Ed25519Keys) > 0
}

// StaticToken is one entry of the tokens file.
type StaticToken struct {
	// Name identifies the token in logs and as the sender of its messages.
	Name string `json:"name"`
	// Token is the secret the client sends as "Authorization: Bearer ...".
	Token string `json:"token"`
	// Role is sluice_producer, sluice_consumer or sluice_admin.
	Role string `json:"role"`
	// Queues are queue-name patterns (path.Match: "orders", "billing.*");
	// empty for every queue.
	Queues []string `json:"queues,omitempty"`
}

// tokensFile is the format of --tokens-file.
type tokensFile struct {
	Tokens []StaticToken `json:"tokens"`
}

// authenticator checks bearer tokens.
type authenticator struct {
	cfg    AuthConfig
	static map[[32]byte]StaticToken
	keys   []jwt.VerificationKey
}

func newAuthenticator(cfg AuthConfig, log *slog.Logger) (*authenticator, error) {
	a := &authenticator{cfg: cfg, static: map[[32]byte]StaticToken{}}
	if cfg.TokensFile != "" {
		tokens, err := LoadTokens(cfg.TokensFile)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(cfg.TokensFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("sluice server: the tokens file is readable or writable by others than its owner: chmod 600 it",
				"file", cfg.TokensFile, "mode", fi.Mode().Perm().String())
		}
		for _, t := range tokens {
			a.static[sha256.Sum256([]byte(t.Token))] = t
		}
	}
	for _, k := range cfg.Ed25519Keys {
		a.keys = append(a.keys, k)
	}
	if (len(cfg.HS256Secret) > 0 || len(cfg.Ed25519Keys) > 0) && cfg.Audience == "" {
		log.Warn("sluice server: JWTs are accepted without an audience check (--jwt-audience): " +
			"any token of the same issuer and key, meant for another service, is accepted here")
	}
	return a, nil
}

// LoadTokens reads a tokens file: {"tokens": [{"name": "billing", "token":
// "...", "role": "sluice_producer", "queues": ["billing.*"]}, ...]}.
func LoadTokens(file string) ([]StaticToken, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	var f tokensFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("reading the tokens file %s: %w", file, err)
	}
	seen, names := map[string]bool{}, map[string]bool{}
	for i, t := range f.Tokens {
		where := fmt.Sprintf("tokens file %s, token %d (%q)", file, i+1, t.Name)
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%s: no name", where)
		case len(t.Token) < 16:
			return nil, fmt.Errorf("%s: the token must have at least 16 characters", where)
		case !slices.Contains(roles, t.Role):
			return nil, fmt.Errorf("%s: role %q is not one of %s", where, t.Role, strings.Join(roles, ", "))
		case seen[t.Token]:
			return nil, fmt.Errorf("%s: the same token is given twice", where)
		case t.Queues != nil && len(t.Queues) == 0:
			// (no member means every queue; an empty list reads as none,
			// and granted every one)
			return nil, fmt.Errorf("%s: \"queues\": [] grants no queue: leave the member out for every queue", where)
		case names[t.Name]:
			// (the name identifies the token: for the concurrency limit,
			// and as the sender of its messages)
			return nil, fmt.Errorf("%s: another token has the same name", where)
		}
		if err := checkPatterns(t.Queues); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		seen[t.Token], names[t.Name] = true, true
	}
	return f.Tokens, nil
}

func checkPatterns(pats []string) error {
	for _, p := range pats {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("bad queue pattern %q", p)
		}
	}
	return nil
}

// ParseEd25519PublicKey reads a PEM "PUBLIC KEY" (PKIX) Ed25519 key.
func ParseEd25519PublicKey(pemBytes []byte) (ed25519.PublicKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the key is a %T, not Ed25519", k)
	}
	return ek, nil
}

// claims are the JWT claims the server reads.
type claims struct {
	jwt.RegisteredClaims
	Role   string   `json:"role"`
	Queues []string `json:"queues,omitempty"`
}

// authenticate returns the principal of a request, or a 401 problem.
func (a *authenticator) authenticate(r *http.Request) (*Principal, error) {
	if a.cfg.Insecure {
		// Without tokens, the concurrency limit applies per client address.
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return &Principal{Subject: "anonymous", key: "anonymous:" + host}, nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return nil, problemf(http.StatusUnauthorized, "unauthorized", "no bearer token: send \"Authorization: Bearer <token>\"")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, problemf(http.StatusUnauthorized, "unauthorized", "the Authorization header must be \"Bearer <token>\"")
	}
	sum := sha256.Sum256([]byte(token))
	if t, ok := a.static[sum]; ok && subtle.ConstantTimeCompare([]byte(t.Token), []byte(token)) == 1 {
		return &Principal{Subject: t.Name, Role: t.Role, Queues: t.Queues, key: "token:" + t.Name}, nil
	}
	if strings.Count(token, ".") != 2 || (len(a.cfg.HS256Secret) == 0 && len(a.keys) == 0) {
		return nil, problemf(http.StatusUnauthorized, "unauthorized", "the bearer token is not valid")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{"HS256", "EdDSA"}), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt()} // (an iat in the future is refused)
	if a.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.cfg.Audience))
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case "HS256":
			if len(a.cfg.HS256Secret) == 0 {
				return nil, errors.New("HS256 tokens are not accepted")
			}
			return a.cfg.HS256Secret, nil
		case "EdDSA":
			if len(a.keys) == 0 {
				return nil, errors.New("EdDSA tokens are not accepted")
			}
			return jwt.VerificationKeySet{Keys: a.keys}, nil
		}
		return nil, fmt.Errorf("algorithm %s is not accepted", t.Method.Alg())
	}, opts...)
	if err != nil {
		return nil, problemf(http.StatusUnauthorized, "unauthorized", "the bearer token is not valid: %v", err)
	}
	if c.Subject == "" {
		// sub identifies the caller: the concurrency limit is per sub, and
		// it is recorded with the messages the token sends. Tokens without
		// one shared one limit, across roles.
		return nil, problemf(http.StatusUnauthorized, "unauthorized", "the bearer token is not valid: it has no sub claim (who the caller is)")
	}
	if !slices.Contains(roles, c.Role) {
		return nil, problemf(http.StatusForbidden, "forbidden", "the token's role claim %q is not one of %s", c.Role, strings.Join(roles, ", "))
	}
	if err := checkPatterns(c.Queues); err != nil {
		return nil, problemf(http.StatusForbidden, "forbidden", "the token's queues claim: %v", err)
	}
	if c.Queues != nil && len(c.Queues) == 0 {
		// (an empty list granted every queue, as no claim does)
		return nil, problemf(http.StatusForbidden, "forbidden", "the token's queues claim is empty: it grants no queue")
	}
	pr := &Principal{Subject: c.Subject, Role: c.Role, Queues: c.Queues, key: "jwt:" + c.Subject}
	if c.ExpiresAt != nil {
		pr.expires = c.ExpiresAt.Time
	}
	return pr, nil
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	if p == nil {
		return &Principal{}
	}
	return p
}

// forbidQueue is the 403 of a queue outside the principal's patterns. It
// does not say whether the queue exists.
func forbidQueue(queue string) *Problem {
	return problemf(http.StatusForbidden, "forbidden", "this token may not use queue %q", queue)
}

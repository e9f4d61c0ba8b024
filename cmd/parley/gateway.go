package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/gateway"
	"github.com/parley-dev/parley/internal/natsauth"
	"github.com/parley-dev/parley/internal/telemetry"
)

// gatewayFlags configure `parley gateway` (and the gateway of `parley dev`).
type gatewayFlags struct {
	Listen       string        `name:"listen" env:"PARLEY_GATEWAY_LISTEN" default:"127.0.0.1:8080" help:"HTTP address of the gateway."`
	TokenFile    string        `name:"token-file" env:"PARLEY_GATEWAY_TOKEN_FILE" type:"existingfile" help:"Static development tokens: one 'token subject' pair a line (white space between; a token at least 16 characters; '#' lines skipped)."`
	JWTIssuer    string        `name:"jwt-issuer" env:"PARLEY_JWT_ISSUER" help:"Required 'iss' of bearer JWTs."`
	JWTAudience  string        `name:"jwt-audience" env:"PARLEY_JWT_AUDIENCE" help:"Required 'aud' of bearer JWTs."`
	JWKSURL      string        `name:"jwks-url" env:"PARLEY_JWKS_URL" help:"JWKS URL of the keys that sign bearer JWTs."`
	JWTSkew      time.Duration `name:"jwt-clock-skew" env:"PARLEY_JWT_CLOCK_SKEW" default:"1m" help:"Accepted clock skew on 'exp'."`
	CORSOrigins  []string      `name:"cors-origin" env:"PARLEY_CORS_ORIGINS" help:"Origins allowed by CORS (repeat; '*' for any). Default: same origin only."`
	RatePerSec   float64       `name:"rate" env:"PARLEY_GATEWAY_RATE" default:"5" help:"Requests per second per user (token bucket)."`
	RateBurst    int           `name:"burst" env:"PARLEY_GATEWAY_BURST" default:"20" help:"Burst of the per-user rate limit."`
	MaxBodyBytes int64         `name:"max-body" env:"PARLEY_GATEWAY_MAX_BODY" default:"524288" help:"Largest request body in bytes (413 beyond)."`
	storeFlags
	// tokenSource is gateway.Options.TokenSource ("": its default).
	tokenSource string
}

type gatewayCmd struct {
	gatewayFlags
}

// Validate checks the flags (kong calls it after parsing).
func (c *gatewayCmd) Validate() error {
	jwt := c.JWTIssuer != "" || c.JWTAudience != "" || c.JWKSURL != ""
	switch {
	case !jwt && c.TokenFile == "":
		return errors.New("gateway: set --jwks-url, --jwt-issuer and --jwt-audience, or --token-file (development)")
	case jwt && (c.JWTIssuer == "" || c.JWTAudience == "" || c.JWKSURL == ""):
		return errors.New("gateway: --jwks-url, --jwt-issuer and --jwt-audience go together")
	case c.RatePerSec <= 0 || c.RateBurst < 1:
		return errors.New("gateway: --rate must be positive and --burst at least 1")
	case c.MaxBodyBytes < 1024:
		return errors.New("gateway: --max-body must be at least 1024")
	}
	return c.storeFlags.check()
}

func (c *gatewayCmd) Run(e *env) error {
	shutdown, _ := telemetry.Setup(e.ctx, "parley-gateway")
	defer func() { _ = shutdown(context.Background()) }()
	var auth gateway.Chain
	if c.JWKSURL != "" {
		j, err := gateway.NewJWT(e.ctx, gateway.JWTConfig{Issuer: c.JWTIssuer, Audience: c.JWTAudience, JWKSURL: c.JWKSURL, ClockSkew: c.JWTSkew})
		if err != nil {
			return err
		}
		auth = append(auth, j)
	}
	if c.TokenFile != "" {
		st, err := gateway.LoadStaticTokens(c.TokenFile)
		if err != nil {
			return err
		}
		auth = append(auth, st)
	}
	// Said in the 401 to anyone, so it names no file of this host.
	switch {
	case c.JWKSURL != "" && c.TokenFile != "":
		c.tokenSource = "tokens are JWTs issued by " + c.JWTIssuer + ", or development tokens from this gateway's operator"
	case c.JWKSURL != "":
		c.tokenSource = "tokens are JWTs issued by " + c.JWTIssuer
	default:
		c.tokenSource = "tokens are handed out by this gateway's operator (its --token-file)"
	}
	wait, addr, err := startGateway(e.ctx, e.NATS, auth, c.gatewayFlags, e.credentials(natsauth.Gateway), e)
	if err != nil {
		return listenHint(err, "--listen", "127.0.0.1:8081")
	}
	fmt.Fprintf(e.stdout, "parley gateway: http://%s/ (API under /v1/; probes /livez, /readyz)\n", addr)
	return wait()
}

// startGateway connects to NATS at url and serves the gateway on
// f.Listen until ctx ends. wait returns Serve's error.
func startGateway(ctx context.Context, url string, auth gateway.Authenticator, f gatewayFlags, creds natsauth.Credentials, e *env) (wait func() error, addr string, err error) {
	log := e.logger(e.stderr).With("worker", "gateway")
	nc, err := natsauth.Connect(url, "parley-gateway", creds, log)
	if err != nil {
		return nil, "", err
	}
	b, err := bus.New(nc, &bus.Options{Logger: log, Storage: f.storage(), Replicas: f.Replicas,
		StartupTimeout: f.StartupTimeout, PublishRetry: f.publishRetry()})
	if err != nil {
		nc.Close()
		return nil, "", err
	}
	g, err := gateway.New(ctx, b, auth, &gateway.Options{Logger: log, AllowedOrigins: f.CORSOrigins,
		RatePerSecond: f.RatePerSec, RateBurst: f.RateBurst, MaxBodyBytes: f.MaxBodyBytes, TokenSource: f.tokenSource})
	if err != nil {
		nc.Close()
		return nil, "", err
	}
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		nc.Close()
		return nil, "", fmt.Errorf("gateway listen: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		defer nc.Close()
		done <- g.Serve(ctx, ln)
	}()
	return func() error { return <-done }, ln.Addr().String(), nil
}

// devTokenFile is the file under parley dev's data dir that holds the
// gateway's development token alone (one line, mode 0600), so that a
// person finds it after dev's output scrolled away and a script reads it
// with $(cat .parley/gateway-token).
const devTokenFile = "gateway-token"

// devToken returns the development token of dataDir's gateway-tokens
// file (the gateway's --token-file format), creating the file with a
// random token for subject "dev" at first start, and writes the token
// to dataDir/devTokenFile (0600) at every start.
func devToken(dataDir string) (gateway.StaticTokens, string, error) {
	st, tok, err := devTokens(dataDir)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dataDir, devTokenFile)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return nil, "", fmt.Errorf("writing %s: %w", path, err)
	}
	// WriteFile keeps the mode of a file that exists.
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, "", fmt.Errorf("writing %s: %w", path, err)
	}
	return st, tok, nil
}

// devTokens reads or creates dataDir's gateway-tokens file (see devToken).
func devTokens(dataDir string) (gateway.StaticTokens, string, error) {
	path := filepath.Join(dataDir, "gateway-tokens")
	if st, err := gateway.LoadStaticTokens(path); err == nil {
		for tok, sub := range st {
			if sub == "dev" {
				return st, tok, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, "", err
	}
	tok := "dev-" + strings.ToLower(rand.Text())
	line := fmt.Sprintf("# parley dev gateway tokens: 'token subject' per line\n%s dev\n", tok)
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return nil, "", fmt.Errorf("writing %s: %w", path, err)
	}
	return gateway.StaticTokens{tok: "dev"}, tok, nil
}

// startDevGateway runs the gateway of `parley dev` on listen with the
// data dir's development token and prints its URL and token.
func startDevGateway(ctx context.Context, url, dataDir, listen string, store storeFlags, creds natsauth.Credentials, e *env) (func() error, error) {
	st, tok, err := devToken(dataDir)
	if err != nil {
		return nil, err
	}
	f := gatewayFlags{Listen: listen, RatePerSec: 20, RateBurst: 50, MaxBodyBytes: 512 << 10, storeFlags: store,
		tokenSource: fmt.Sprintf("parley dev prints the token when it starts and keeps it in %s", filepath.Join(dataDir, devTokenFile))}
	wait, addr, err := startGateway(ctx, url, st, f, creds, e)
	if err != nil {
		return nil, listenHint(err, "--gateway-listen", "127.0.0.1:8081")
	}
	fmt.Fprintf(e.stdout, "Web chat: http://%s/#token=%s\nGateway token (user \"dev\"): %s\n  (kept in %s; the web chat asks for it when the link has none)\n",
		addr, tok, tok, filepath.Join(dataDir, devTokenFile))
	return wait, nil
}

// listenHint adds to err, when an address is already in use, what to do:
// stop the other server or pass flag with a free port (example, e.g.
// "127.0.0.1:8081"). Any other error is returned as is.
func listenHint(err error, flag, example string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return fmt.Errorf("%w: another server (a parley dev?) listens there; stop it, or pass %s with a free port (e.g. %s %s)", err, flag, flag, example)
}

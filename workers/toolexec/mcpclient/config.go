package mcpclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parley-dev/parley/workers/toolexec"
)

// Config is an MCP servers file (`parley toolexec --mcp-config
// servers.json`): the servers whose tools the tool-executor runs, by name.
// Each server's tools are registered as "<name>__<tool>".
//
//	{
//	  "servers": {
//	    "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "trusted": true},
//	    "remote":     {"url": "https://mcp.example.com/mcp", "bearerTokenFile": "/run/secrets/mcp-token"}
//	  }
//	}
type Config struct {
	// Servers maps a server name (1 to 64 characters of A-Z a-z 0-9 -) to
	// its configuration.
	Servers map[string]ServerConfig `json:"servers"`
}

// ServerConfig is one MCP server: exactly one of Command (stdio) or URL
// (streamable HTTP).
type ServerConfig struct {
	// Command is the program to start for a stdio server; it speaks MCP on
	// its stdin and stdout, and its stderr goes to the log.
	Command string `json:"command,omitempty"`
	// Args are the command's arguments.
	Args []string `json:"args,omitempty"`
	// Env is added to the command's environment, which otherwise holds only
	// PATH, HOME, USER, LANG, LC_ALL, TMPDIR and TZ from parley's own (a
	// server must not see parley's credentials unless given them here).
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the command's working directory; relative to the config
	// file's directory. Default: the config file's directory.
	Cwd string `json:"cwd,omitempty"`

	// URL is the endpoint of a streamable HTTP server (http or https).
	URL string `json:"url,omitempty"`
	// Headers are sent with every HTTP request.
	Headers map[string]string `json:"headers,omitempty"`
	// BearerTokenFile names a file holding a token sent as "Authorization:
	// Bearer <token>" (surrounding white space trimmed); relative to the
	// config file's directory. It is read at every (re)connection, so a
	// rotated token is picked up.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`

	// Trusted says whether the server's tool annotations are believed. The
	// annotations of an untrusted server are dropped at registration, so
	// its tools count as unannotated: not read-only, destructive, not
	// idempotent (MCP: "clients MUST consider tool annotations to be
	// untrusted unless they come from trusted servers"). Default: false.
	Trusted bool `json:"trusted,omitempty"`
	// CallTimeout bounds one tools/call, as a Go duration ("90s"); a server
	// that does not answer in time is sent notifications/cancelled and the
	// call's outcome is unknown. Default: 60s; at most 1h.
	CallTimeout string `json:"callTimeout,omitempty"`

	// dir is the config file's directory.
	dir string
}

// Default and maximum of ServerConfig.CallTimeout.
const (
	DefaultCallTimeout = 60 * time.Second
	MaxCallTimeout     = time.Hour
)

// MaxServers bounds the servers of one config file.
const MaxServers = 64

// LoadConfig reads and checks the config file at path. The error names
// the file, the server and the field that broke a rule.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	c, err := ParseConfig(data, dir)
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and checks a config; relative paths are resolved
// against dir. Unknown fields are rejected.
func ParseConfig(data []byte, dir string) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if c.Servers == nil {
		return nil, errors.New("servers: required, an object of server name to server")
	}
	if len(c.Servers) > MaxServers {
		return nil, fmt.Errorf("servers: at most %d servers", MaxServers)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Servers)) {
		s := c.Servers[name]
		if err := toolexec.ValidSourceName(name); err != nil {
			return nil, fmt.Errorf("servers: %w", err)
		}
		s.dir = dir
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("servers.%s.%w", name, err)
		}
		c.Servers[name] = s
	}
	return &c, nil
}

// check validates s; the error starts with the field name.
func (s *ServerConfig) check() error {
	switch {
	case s.Command == "" && s.URL == "":
		return errors.New("command: one of command (stdio) or url (streamable HTTP) is required")
	case s.Command != "" && s.URL != "":
		return errors.New("url: command and url are mutually exclusive")
	}
	if s.Command != "" {
		if len(s.Headers) > 0 || s.BearerTokenFile != "" {
			return errors.New("headers: only for url servers")
		}
	} else {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url: %q must be an absolute http or https URL", s.URL)
		}
		if len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != "" {
			return errors.New("args: args, env and cwd are only for command servers")
		}
		for k := range s.Headers {
			if k == "" || strings.ContainsAny(k, " :\r\n") {
				return fmt.Errorf("headers: %q is not a header name", k)
			}
		}
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env: %q is not a variable name", k)
		}
	}
	if s.CallTimeout != "" {
		d, err := time.ParseDuration(s.CallTimeout)
		if err != nil || d <= 0 || d > MaxCallTimeout {
			return fmt.Errorf("callTimeout: %q must be a Go duration in (0, %s]", s.CallTimeout, MaxCallTimeout)
		}
	}
	return nil
}

// callTimeout returns the effective CallTimeout.
func (s *ServerConfig) callTimeout() time.Duration {
	if d, err := time.ParseDuration(s.CallTimeout); err == nil && d > 0 {
		return d
	}
	return DefaultCallTimeout
}

// path resolves p against the config file's directory.
func (s *ServerConfig) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, p)
}

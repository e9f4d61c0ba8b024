package schema

import (
	"maps"
	"slices"
	"strings"
	"unicode"
)

// parley owns the _meta keys it gives meaning to: a client draws parley's
// confirmation for _meta["drupal.org/ai.tool_call"], trusts the question
// ID in _meta["drupal.org/ai.elicitation_id"], and so on. What an MCP
// server sends is data from outside parley, so a question or a tool
// definition from a server loses every reserved key (IsReservedMetaKey)
// before parley shows it, and parley marks the question with the server
// it came from (MetaMCPServer).

// MetaMCPServer marks a question (the params of an elicitation/create)
// that an MCP server asked, with the server's name and whether the
// deployment trusts it: an MCPServerMeta. parley's tool-executor sets it
// on every server question; a server never can (IsReservedMetaKey). A
// question without it was asked by parley itself (a confirmation) or by
// one of parley's built-in tools.
const MetaMCPServer = "dev.parley/mcp_server"

// MetaMCPTool marks the registered definition of an MCP server's tool: an
// MCPToolMeta naming the server, the server's own tool name and whether
// the server is trusted. The tool-executor sets it at registration.
const MetaMCPTool = "dev.parley/mcp"

// MCPServerMeta is the value of _meta["dev.parley/mcp_server"]:
// {"name": "evil", "trusted": false, "secretFields": ["password"]}.
type MCPServerMeta struct {
	// Name is the server's name in the tool-executor's configuration.
	Name string `json:"name"`
	// Trusted is the server's "trusted" setting: false unless the
	// deployment said otherwise. Clients warn on questions from servers
	// that are not trusted.
	Trusted bool `json:"trusted"`
	// SecretFields names the form's properties that look like they ask
	// for a secret (SecretFields); clients warn on them. Absent when none
	// do.
	SecretFields []string `json:"secretFields,omitempty"`
}

// MCPToolMeta is the value of _meta["dev.parley/mcp"] on the registered
// definition of an MCP server's tool.
type MCPToolMeta struct {
	// Server is the server's name in the configuration.
	Server string `json:"server"`
	// Tool is the tool's name on the server (registered as
	// "<server>__<tool>").
	Tool string `json:"tool"`
	// Trusted is the server's "trusted" setting.
	Trusted bool `json:"trusted"`
}

// reservedMetaPrefixes are the prefixes, compared case-insensitively,
// under which parley alone writes _meta keys.
var reservedMetaPrefixes = []string{"dev.parley/", "drupal.org/parley.", "drupal.org/ai."}

// IsReservedMetaKey reports whether key is one parley alone may write on
// what it shows a person: every key under "dev.parley/" and
// "drupal.org/parley." (parley's own), and every key under
// "drupal.org/ai." (the registry parley gives meaning to: tool_call draws
// a confirmation, elicitation_id names the question, and so on), compared
// case-insensitively. The one exception is "drupal.org/ai.widgets": a
// rendering hint for a property of the form it travels with, which claims
// nothing about who asks (the property stays a primitive a client may
// render plainly).
func IsReservedMetaKey(key string) bool {
	if key == MetaWidgets {
		return false
	}
	for _, p := range reservedMetaPrefixes {
		if len(key) >= len(p) && strings.EqualFold(key[:len(p)], p) {
			return true
		}
	}
	return false
}

// WithoutReserved returns m without its reserved keys (IsReservedMetaKey)
// and the keys it left out, sorted. m itself is not changed; with nothing
// to leave out, the result is m.
func (m Meta) WithoutReserved() (Meta, []string) {
	var dropped []string
	for k := range m {
		if IsReservedMetaKey(k) {
			dropped = append(dropped, k)
		}
	}
	if len(dropped) == 0 {
		return m, nil
	}
	slices.Sort(dropped)
	out := maps.Clone(m)
	for _, k := range dropped {
		delete(out, k)
	}
	return out, dropped
}

// MCPServer returns _meta["dev.parley/mcp_server"]: the MCP server that
// asked the question (nil when absent: parley asked it).
func (m Meta) MCPServer() (*MCPServerMeta, error) {
	v, ok, err := metaGet[MCPServerMeta](m, MetaMCPServer)
	if !ok || err != nil {
		return nil, err
	}
	return &v, nil
}

// SetMCPServer stores v at _meta["dev.parley/mcp_server"].
func (m *Meta) SetMCPServer(v MCPServerMeta) { m.set(MetaMCPServer, v) }

// MCPTool returns _meta["dev.parley/mcp"] of a tool definition: the MCP
// server the tool comes from (nil when absent or unreadable: a built-in
// tool).
func (t *Tool) MCPTool() *MCPToolMeta {
	v, ok, err := metaGet[MCPToolMeta](t.Meta, MetaMCPTool)
	if !ok || err != nil || v.Server == "" {
		return nil
	}
	return &v
}

// SecretFields returns the properties of a form that look like they ask
// for a secret, in PropertyNames order: MCP 2025-11-25 (elicitation,
// "Security Considerations") says "Servers MUST NOT use form mode
// elicitation to request sensitive information such as passwords, API
// keys, access tokens, or payment credentials". A property counts when
// its format is "password" or its name or title, split into words (at
// "_", "-", spaces and camelCase), has a word password, passwd, pwd,
// passphrase, secret, token, credential(s), otp, cvv or cvc, the pairs
// api key, access key, private key, card number, credit card or security
// code, or, run together, one of password, passwd, passphrase, apikey,
// accesstoken, authtoken, privatekey, secretkey or clientsecret. It is a
// heuristic: "max_tokens" does not count ("tokens"), "sitepassword" does.
// A URL-mode request has no fields.
func SecretFields(p *ElicitRequestParams) []string {
	if p == nil || p.IsURLMode() {
		return nil
	}
	var out []string
	for _, name := range p.RequestedSchema.PropertyNames() {
		ps := p.RequestedSchema.Properties[name]
		if ps == nil {
			continue
		}
		if strings.EqualFold(ps.Format, "password") || looksSecret(name) || looksSecret(ps.Title) {
			out = append(out, name)
		}
	}
	return out
}

var (
	secretWords = map[string]bool{"password": true, "passwd": true, "pwd": true, "passphrase": true, "secret": true,
		"token": true, "credential": true, "credentials": true, "otp": true, "cvv": true, "cvc": true}
	secretPairs = [][2]string{{"api", "key"}, {"access", "key"}, {"private", "key"}, {"card", "number"},
		{"credit", "card"}, {"security", "code"}}
	secretRuns = []string{"password", "passwd", "passphrase", "apikey", "accesstoken", "authtoken", "privatekey",
		"secretkey", "clientsecret"}
)

// looksSecret applies SecretFields' word rules to one name or title.
func looksSecret(s string) bool {
	if s == "" {
		return false
	}
	ws := words(s)
	for i, w := range ws {
		if secretWords[w] {
			return true
		}
		if i > 0 {
			for _, p := range secretPairs {
				if ws[i-1] == p[0] && w == p[1] {
					return true
				}
			}
		}
	}
	run := strings.Join(ws, "")
	for _, r := range secretRuns {
		if strings.Contains(run, r) {
			return true
		}
	}
	return false
}

// words splits s into lower-case words at every character that is not a
// letter or digit and before an upper-case letter that follows a
// lower-case one ("apiKey" is "api", "key").
func words(s string) []string {
	var out []string
	var cur []rune
	prevLower := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
			prevLower = false
			continue
		case unicode.IsUpper(r) && prevLower:
			flush()
		}
		cur = append(cur, r)
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	flush()
	return out
}

package schema

import (
	"maps"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
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
//   - its format is "password";
//   - its name or title, split into words (at "_", "-", spaces and
//     camelCase), has a word password, passwd, pwd, passphrase, passcode,
//     secret, token, credential(s), otp, totp, cvv or cvc, the pairs api
//     key, access key, private key, card number, credit card or security
//     code, or, run together, one of password, passwd, passphrase,
//     apikey, accesstoken, authtoken, privatekey, secretkey or
//     clientsecret;
//   - its description, read as prose, names a secret (looksSecretProse:
//     the same words, but "token" only as access, auth, api, bearer,
//     session or refresh token); or
//   - it is a free-text string (no enum, no oneOf) and the form's message,
//     read as prose, names a secret: "Enter your admin password" over a
//     field called "answer" asks for the password all the same.
//
// Names, titles, descriptions and the message are compared after NFKC
// (fullwidth and mathematical letters become plain ones), with Cyrillic
// and Greek letters that look like Latin ones read as those ("раssword"
// with a Cyrillic "р" and "а"), and once more with digits and signs
// commonly written for letters read as those letters ("p@ssw0rd"). It is a
// heuristic: "max_tokens" does not count ("tokens"), "sitepassword" does.
// A URL-mode request has no fields.
func SecretFields(p *ElicitRequestParams) []string {
	if p == nil || p.IsURLMode() {
		return nil
	}
	askedInMessage := looksSecretProse(p.Message)
	var out []string
	for _, name := range p.RequestedSchema.PropertyNames() {
		ps := p.RequestedSchema.Properties[name]
		if ps == nil {
			continue
		}
		if strings.EqualFold(strings.TrimSpace(foldLookAlikes(ps.Format)), "password") || looksSecret(name) || looksSecret(ps.Title) ||
			looksSecretProse(ps.Description) || (askedInMessage && ps.kind() == kindString) {
			out = append(out, name)
		}
	}
	return out
}

var (
	secretWords = map[string]bool{"password": true, "passwd": true, "pwd": true, "passphrase": true, "passcode": true,
		"secret": true, "token": true, "credential": true, "credentials": true, "otp": true, "totp": true, "cvv": true, "cvc": true}
	secretPairs = [][2]string{{"api", "key"}, {"access", "key"}, {"private", "key"}, {"card", "number"},
		{"credit", "card"}, {"security", "code"}}
	secretRuns = []string{"password", "passwd", "passphrase", "apikey", "accesstoken", "authtoken", "privatekey",
		"secretkey", "clientsecret"}
	// tokenPairs are the "<word> token" pairs that name a secret in prose,
	// where "token" alone ("the token limit") need not.
	tokenPairs = []string{"access", "auth", "api", "bearer", "session", "refresh"}
)

// looksSecret applies SecretFields' word rules to one name or title, as
// written and with look-alike characters read as the letters they imitate
// (foldLookAlikes, deleet).
func looksSecret(s string) bool {
	if s == "" {
		return false
	}
	f := foldLookAlikes(s)
	return looksSecretWords(words(f)) || looksSecretWords(words(deleet(f)))
}

func looksSecretWords(ws []string) bool {
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

// looksSecretProse applies SecretFields' rules to a sentence (a
// description or a form's message): the secret words and pairs, "token"
// only after one of tokenPairs, and the run-together forms only within
// one word (a whole sentence run together would find "password" in "by
// pass words").
func looksSecretProse(s string) bool {
	if s == "" {
		return false
	}
	f := foldLookAlikes(s)
	return proseWords(words(f)) || proseWords(words(deleet(f)))
}

func proseWords(ws []string) bool {
	for i, w := range ws {
		if w != "token" && secretWords[w] {
			return true
		}
		for _, r := range secretRuns {
			if strings.Contains(w, r) {
				return true
			}
		}
		if i == 0 {
			continue
		}
		for _, p := range secretPairs {
			if ws[i-1] == p[0] && w == p[1] {
				return true
			}
		}
		if w == "token" || w == "tokens" {
			if slices.Contains(tokenPairs, ws[i-1]) {
				return true
			}
		}
	}
	return false
}

// lookAlikes maps Cyrillic and Greek letters that look like Latin ones
// (Unicode's confusables for the Latin alphabet) to those Latin letters.
var lookAlikes = map[rune]rune{
	'а': 'a', 'в': 'b', 'е': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y',
	'х': 'x', 'ѕ': 's', 'і': 'i', 'ј': 'j', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'ɑ': 'a', 'ı': 'i',
	'А': 'A', 'В': 'B', 'Е': 'E', 'К': 'K', 'М': 'M', 'Н': 'H', 'О': 'O', 'Р': 'P', 'С': 'C', 'Т': 'T', 'Х': 'X',
	'Ѕ': 'S', 'І': 'I', 'Ј': 'J', 'Ԁ': 'D', 'Ԛ': 'Q', 'Ԝ': 'W',
	'α': 'a', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x', 'ω': 'w',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O', 'Ρ': 'P',
	'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
}

// FoldLookAlikes returns s as it reads (foldLookAlikes): in NFKC, with
// the Cyrillic and Greek letters that look like Latin ones replaced by
// those, and the characters that draw nothing removed. Clients use it to
// tell whether a text from outside reads as words parley reserves.
func FoldLookAlikes(s string) string { return foldLookAlikes(s) }

// foldLookAlikes returns s in NFKC with the letters of lookAlikes
// replaced and the characters that draw nothing (format characters such
// as zero-width spaces and soft hyphens, and combining marks) removed, so
// that "pass\u200bword" reads as one word.
func foldLookAlikes(s string) string {
	return strings.Map(func(r rune) rune {
		if l, ok := lookAlikes[r]; ok {
			return l
		}
		if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, norm.NFKC.String(s))
}

// deleet reads digits and signs commonly written for letters as those
// letters: "p@ssw0rd" is "password", "s3cr3t" is "secret".
var deleet = strings.NewReplacer("0", "o", "1", "i", "3", "e", "4", "a", "5", "s", "7", "t", "@", "a", "$", "s").Replace

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

// MetaOf returns the _meta of content block c, for reading and writing;
// nil for a block of a type parley does not know.
func MetaOf(c Content) *Meta {
	switch c := c.(type) {
	case *TextContent:
		return &c.Meta
	case *ImageContent:
		return &c.Meta
	case *AudioContent:
		return &c.Meta
	case *ResourceLink:
		return &c.Meta
	case *EmbeddedResource:
		return &c.Meta
	}
	return nil
}

// FromMCPServer makes the result of a tool of MCP server name one parley
// may pass on, changing r in place: the result's _meta, every content
// block's and every embedded resource's lose the reserved keys
// (IsReservedMetaKey), except that a trusted server's blocks keep
// _meta["drupal.org/ai.entity"] (the deployment vouches for the site
// entities it names); and every block is marked with the server
// (_meta["dev.parley/mcp_server"] = {name, trusted}), so that a client
// showing it to the person (design section 5: blocks for the user, and
// resource links) says which server's words they are. It returns the keys
// it dropped, sorted and without repeats.
func (r *CallToolResult) FromMCPServer(name string, trusted bool) []string {
	var dropped []string
	strip := func(m *Meta, keep string) {
		kept, ks := m.WithoutReserved()
		for _, k := range ks {
			if k == keep {
				kept = kept.Clone()
				kept[k] = (*m)[k]
				continue
			}
			dropped = append(dropped, k)
		}
		*m = kept
	}
	strip(&r.Meta, "")
	keep := ""
	if trusted {
		keep = MetaEntity
	}
	for _, c := range r.Content {
		m := MetaOf(c)
		if m == nil {
			continue
		}
		strip(m, keep)
		if er, ok := c.(*EmbeddedResource); ok {
			strip(&er.Resource.Meta, "")
		}
		if ShownToUser(c) {
			*m = m.Clone()
			m.SetMCPServer(MCPServerMeta{Name: name, Trusted: trusted})
		}
	}
	slices.Sort(dropped)
	return slices.Compact(dropped)
}

// ShownToUser reports whether a content block of a tool result is meant
// for the end user (design section 5), so that the agent passes it on in
// the turn's answer: a block whose annotations' audience has "user", or a
// resource link without an audience (an entity the answer refers to).
// Other blocks only feed the model.
func ShownToUser(c Content) bool {
	a := AnnotationsOf(c)
	if _, link := c.(*ResourceLink); link && (a == nil || len(a.Audience) == 0) {
		return true
	}
	if a == nil {
		return false
	}
	return slices.Contains(a.Audience, RoleUser)
}

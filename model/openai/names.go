package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// functionNameRE is the chat-completions API's pattern for function names.
var functionNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// APIName returns the function name offered to the API for parley tool
// name: name itself when it matches ^[a-zA-Z0-9_-]{1,64}$, otherwise every
// other character replaced by "_", cut to 55 characters and suffixed with
// "_" and 8 hex digits of the name's SHA-256 (so distinct names stay
// distinct). It is deterministic: the same name maps the same way on every
// agent, which keeps the provider stateless.
func APIName(name string) string {
	if functionNameRE.MatchString(name) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if r < 128 && (r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 55 {
		s = s[:55]
	}
	sum := sha256.Sum256([]byte(name))
	return s + "_" + hex.EncodeToString(sum[:4])
}

// nameMap maps API names back to parley tool names.
type nameMap map[string]string

// add registers name and returns its API name.
func (m nameMap) add(name string) string {
	api := APIName(name)
	m[api] = name
	return api
}

// parley returns the parley name of an API name the model used (the name
// itself when unknown: the agent answers "Unknown tool").
func (m nameMap) parley(api string) string {
	if n, ok := m[api]; ok {
		return n
	}
	return api
}

package main

import (
	"strings"
	"unicode"

	"github.com/parley-dev/parley/schema"
)

// urlConsent asks a URL-mode elicitation (MCP 2025-11-25): the server
// wants the person to open a web page out of band. The full URL and,
// separately, its host are shown (a look-alike host is flagged,
// lookAlikeHost); parley never opens the URL itself.
// y is consent to open it (accept), n declines, c cancels; the answer
// never carries content.
func (s *chatSession) urlConsent(req *schema.ElicitRequestParams) (schema.ElicitResult, error) {
	s.say("? %s", indentRest(req.Message))
	s.say("  The server asks you to open this web page yourself (parley does not open it):")
	host := req.URLHost()
	if host == "" {
		host = "(none: do not open it)"
	}
	s.say("  host: %s", host)
	if lookAlikeHost(host) {
		s.say("        ! the host has non-ASCII characters (or their xn-- encoding): it may imitate a familiar name")
	}
	s.say("  url:  %s", req.URL)
	action, err := s.askAction("  Open it yourself and let the server go on? [y = I consent / n = decline / c = cancel] ", "consent")
	if err != nil {
		return schema.ElicitResult{}, err
	}
	return schema.ElicitResult{Action: action}, nil
}

// lookAlikeHost reports whether host has non-ASCII characters or a label in
// their ASCII (punycode, "xn--") encoding, as the web chat flags it: such a
// host may imitate a familiar name.
func lookAlikeHost(host string) bool {
	if strings.IndexFunc(host, func(r rune) bool { return r > unicode.MaxASCII }) >= 0 {
		return true
	}
	for label := range strings.SplitSeq(strings.ToLower(host), ".") {
		if strings.HasPrefix(label, "xn--") {
			return true
		}
	}
	return false
}

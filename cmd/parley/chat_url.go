package main

import (
	"strings"
	"unicode"

	"github.com/parley-dev/parley/schema"
)

// urlConsent asks a URL-mode elicitation (MCP 2025-11-25): the server
// wants the person to open a web page out of band. The full URL and,
// separately, its host are shown (a host with non-ASCII characters is
// flagged: it may imitate another); parley never opens the URL itself.
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
	if strings.IndexFunc(host, func(r rune) bool { return r > unicode.MaxASCII }) >= 0 {
		s.say("        ! the host has non-ASCII characters: it may imitate a familiar name")
	}
	s.say("  url:  %s", req.URL)
	for {
		line, err := s.readLine("  Open it yourself and let the server go on? [y = I consent / n = decline / c = cancel] ", false)
		if err != nil {
			return schema.ElicitResult{}, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return schema.ElicitResult{Action: schema.ActionAccept}, nil
		case "n", "no", "!decline":
			return schema.ElicitResult{Action: schema.ActionDecline}, nil
		case "c", "cancel", "!cancel":
			return schema.ElicitResult{Action: schema.ActionCancel}, nil
		}
		s.say("  please answer y (consent), n (decline) or c (cancel)")
	}
}

package main

import (
	"strings"
	"time"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// approvalsCommand runs the chat's standing-approval commands and reports
// whether text was one: "/approvals" lists the thread's, "/revoke <tool>"
// (or "/revoke all") revokes them.
func (s *chatSession) approvalsCommand(text string) bool {
	fields := strings.Fields(text)
	if len(fields) == 0 || (fields[0] != "/approvals" && fields[0] != "/revoke") {
		return false
	}
	if s.approvals == nil {
		s.say("! standing approvals are not available here")
		return true
	}
	revoke := ""
	if fields[0] == "/revoke" {
		if len(fields) != 2 {
			s.say("  usage: /revoke <tool> (or /revoke all)")
			return true
		}
		revoke = fields[1]
		if revoke == "all" {
			revoke = "*"
		} else if err := events.ValidToken("tool", revoke); err != nil {
			s.say("! %v", err)
			return true
		}
	}
	r, err := s.approvals(revoke)
	if err != nil {
		s.say("! %v", err)
		return true
	}
	var b strings.Builder
	printApprovals(&b, r, time.Now())
	s.say("  %s", strings.TrimRight(strings.ReplaceAll(b.String(), "\n", "\n  "), " \n"))
	return true
}

// standingOffered reports whether the confirmation req offers a standing
// approval (_meta["dev.parley/standing"]) of a readable tool call.
func standingOffered(req *schema.ElicitRequestParams, tc *schema.ToolCallMeta) bool {
	_, offered := req.Meta[events.MetaStanding]
	return offered && tc != nil
}

// confirmStanding asks a confirmation that offers a standing approval:
// besides y, n and c, typing "t" accepts and allows the tool for this
// thread, and, when the call is editable, "e" asks for new arguments (an
// Action of actionEdit). A decline comes back without content (the
// caller asks its instructions). An empty line never approves.
func (s *chatSession) confirmStanding(tc *schema.ToolCallMeta, editable bool) (schema.ElicitResult, error) {
	prompt, again := "  Allow? [y/n/c, or t: allow "+tc.Name+" for this thread without asking", "  please answer y (allow once), t (allow for this thread), n (decline) or c (cancel)"
	if editable {
		prompt += ", or e: edit the arguments"
		again += ", or e to edit the arguments"
	}
	prompt += "] "
	for {
		line, err := s.readLine(prompt, false)
		if err != nil {
			return schema.ElicitResult{}, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return schema.ElicitResult{Action: schema.ActionAccept}, nil
		case "t", "thread":
			s.say("  (later %s calls in this thread run without asking; /approvals lists them, /revoke %s revokes)", tc.Name, tc.Name)
			return schema.ElicitResult{Action: schema.ActionAccept,
				Meta: schema.Meta{events.MetaStanding: events.StandingChoice{Scope: events.StandingScopeThread}}}, nil
		case "n", "no", "!decline":
			return schema.ElicitResult{Action: schema.ActionDecline}, nil
		case "c", "cancel", "!cancel":
			return schema.ElicitResult{Action: schema.ActionCancel}, nil
		case "e", "edit":
			if editable {
				return schema.ElicitResult{Action: actionEdit}, nil
			}
		}
		s.say("%s", again)
	}
}

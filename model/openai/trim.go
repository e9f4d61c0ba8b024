package openai

import (
	"fmt"

	"github.com/parley-dev/parley/model"
)

// estimateTokens is a rough token count of m: a quarter of its bytes plus
// a per-message overhead. It overestimates for English, which errs on the
// side of fitting.
func estimateTokens(m model.Message) int {
	n := len(m.Text) + len(m.ToolName)
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments) + len(c.ID)
	}
	return n/4 + 8
}

// Trim fits msgs into budget estimated tokens by this policy:
//
//   - system messages are always kept;
//   - the current turn (from the latest user message on: the question, the
//     assistant's tool calls and every tool result, answered or pending)
//     is always kept, whole;
//   - earlier history is dropped oldest first, a unit at a time: a user
//     message, or an assistant message together with all its tool results
//     (a tool result is never sent without the call it answers, nor a call
//     without its results);
//   - when anything was dropped, a system note saying how many messages
//     were left out takes their place.
//
// If the kept part alone exceeds budget, Trim returns a *model.Error with
// reason context_length: nothing the turn needs is dropped silently.
// budget ≤ 0 returns msgs unchanged.
func Trim(msgs []model.Message, budget int) ([]model.Message, error) {
	if budget <= 0 {
		return msgs, nil
	}
	total := 0
	for _, m := range msgs {
		total += estimateTokens(m)
	}
	if total <= budget {
		return msgs, nil
	}
	current := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleUser {
			current = i
			break
		}
	}
	// Units of earlier history: [start, end) ranges of non-system messages.
	type unit struct{ start, end, tokens int }
	var units []unit
	for i := 0; i < current; {
		if msgs[i].Role == model.RoleSystem {
			i++
			continue
		}
		u := unit{start: i, end: i + 1, tokens: estimateTokens(msgs[i])}
		if msgs[i].Role == model.RoleAssistant && len(msgs[i].ToolCalls) > 0 {
			for u.end < current && msgs[u.end].Role == model.RoleTool {
				u.tokens += estimateTokens(msgs[u.end])
				u.end++
			}
		}
		units = append(units, u)
		i = u.end
	}
	note := model.Message{Role: model.RoleSystem, Text: "[parley: 0000000 earlier messages were left out to fit the model's context]"}
	total += estimateTokens(note)
	drop := map[int]bool{}
	dropped := 0
	for _, u := range units {
		if total <= budget {
			break
		}
		for i := u.start; i < u.end; i++ {
			drop[i] = true
		}
		dropped += u.end - u.start
		total -= u.tokens
	}
	if total > budget {
		return nil, &model.Error{Reason: model.ReasonContextLength,
			Err: fmt.Errorf("the current turn needs about %d tokens, more than the %d the model's context leaves for it", total, budget)}
	}
	out := make([]model.Message, 0, len(msgs)-dropped+1)
	noted := false
	for i, m := range msgs {
		if drop[i] {
			if !noted {
				out = append(out, model.Message{Role: model.RoleSystem,
					Text: fmt.Sprintf("[parley: %d earlier messages were left out to fit the model's context]", dropped)})
				noted = true
			}
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

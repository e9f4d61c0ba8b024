package openai

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	oai "github.com/openai/openai-go/v3"

	"github.com/parley-dev/parley/model"
)

// errStreamCut is a stream that ended before a finish_reason and before
// its [DONE].
var errStreamCut = errors.New("the response stream ended before the model finished")

// errUnreadable is a stream whose tool calls could not be read, not one
// of them (see assembler).
var errUnreadable = errors.New("the model's tool calls could not be read")

// errNoFinish is a stream that ended with [DONE] but neither a
// finish_reason nor anything usable (text, or tool calls that can all be
// read).
var errNoFinish = errors.New("the response stream ended with [DONE] but no finish_reason, and without text or complete tool calls")

// errNoCalls is a stream whose finish_reason says the model called tools
// ("tool_calls", or the legacy "function_call") but that carried neither a
// tool call nor text: the calls were lost on the way (a server's tool-call
// parser failing), so the attempt is retried.
var errNoCalls = errors.New("the response stream finished with tool calls but carried none, and no text")

// classify decides what a failed attempt means: retry (after at least
// wait, from Retry-After when the server sent one) or a final *model.Error.
func classify(err error) (retry bool, wait time.Duration, final *model.Error) {
	var ae *oai.Error
	if errors.As(err, &ae) {
		status := ae.StatusCode
		switch {
		case status == http.StatusTooManyRequests || status >= 500:
			return true, retryAfter(ae.Response), nil
		case isContextLength(ae):
			return false, 0, &model.Error{Reason: model.ReasonContextLength, Status: status, Err: err}
		default:
			return false, 0, &model.Error{Reason: model.ReasonRejected, Status: status, Err: err}
		}
	}
	// Connection errors, timeouts of one attempt, cut streams.
	return true, 0, nil
}

// isContextLength recognises the context-length refusal: OpenAI's code
// context_length_exceeded, or the wording vLLM, llama.cpp and others use.
func isContextLength(ae *oai.Error) bool {
	if ae.Code == "context_length_exceeded" {
		return true
	}
	msg := strings.ToLower(ae.Message + " " + ae.RawJSON())
	for _, s := range []string{"context_length_exceeded", "maximum context length", "context length", "context window", "too many tokens"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// retryAfter reads retry-after-ms (milliseconds, OpenAI) or Retry-After
// (seconds or an HTTP date, RFC 9110 section 10.2.3); 0 when absent.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	if v := resp.Header.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// backoff is the pause before retry n (from 1): 500ms doubling, ±20%
// jitter, capped at max.
func backoff(n int, max time.Duration) time.Duration {
	d := 500 * time.Millisecond << min(n-1, 10)
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	return min(d, max)
}

package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// Provider is a model.Provider for an OpenAI-compatible chat-completions
// endpoint. It is safe for concurrent use and holds no state between
// calls.
type Provider struct {
	cfg    Config
	client oai.Client
	host   string
	log    *slog.Logger
}

// New checks cfg and returns a Provider. httpClient may be nil
// (http.DefaultClient's transport is used).
func New(cfg Config, httpClient *http.Client) (*Provider, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(httpClient),
		// Retries are parley's (classify): the SDK would also retry 408
		// and 409, and cannot retry a stream cut after its headers.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	} else {
		opts = append(opts, option.WithHeaderDel("Authorization"))
	}
	host := ""
	if u, err := url.Parse(cfg.BaseURL); err == nil {
		host = u.Hostname()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Provider{cfg: cfg, client: oai.NewClient(opts...), host: host, log: log}, nil
}

// ProviderName is the gen_ai.provider.name metrics carry: "openai" (the
// OpenAI API and the endpoints compatible with it).
func (p *Provider) ProviderName() string { return "openai" }

// Complete sends req (streaming) and returns the answer: text (folded
// from the streamed chunks) or tool calls with parley's tool names. A
// failure the turn should end with is a *model.Error.
func (p *Provider) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	s := p.cfg.settings(req.Agent)
	params, names, err := p.params(req, s)
	if err != nil {
		return model.Response{}, err
	}
	// The agent's model-call span gets the request side of the GenAI
	// semantic conventions.
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(semconv.GenAIRequestModel(s.Model), attribute.String("server.address", p.host))
	if s.Temperature != nil {
		span.SetAttributes(semconv.GenAIRequestTemperature(*s.Temperature))
	}
	if s.MaxTokens > 0 {
		span.SetAttributes(semconv.GenAIRequestMaxTokens(int(s.MaxTokens)))
	}
	var lastErr error
	status, attempts := 0, 0
	for attempt := 1; ; attempt++ {
		attempts = attempt
		resp, err := p.attempt(ctx, params, names, attempt, req.OnDelta)
		if err == nil {
			if s.SuggestReplies && len(resp.ToolCalls) == 0 && resp.ToolCallsError == "" {
				resp.Text, resp.SuggestedReplies = splitSuggestions(resp.Text)
				chunk := schema.ChatMessage{Role: schema.RoleAssistant, Text: resp.Text}
				if cs, _ := foldedCitations(resp.Chunks); len(cs) > 0 {
					chunk.Meta.SetCitations(clipAnchors(cs, utf8.RuneCountInString(resp.Text)))
				}
				resp.Chunks = []schema.ChatMessage{chunk}
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return model.Response{}, ctx.Err()
		}
		retry, wait, final := classify(err)
		status = 0
		if ae := (*oai.Error)(nil); errors.As(err, &ae) {
			status = ae.StatusCode
		}
		if final != nil {
			final.Attempts = attempt
			return model.Response{}, final
		}
		lastErr = err
		if !retry || attempt > p.cfg.MaxRetries {
			break
		}
		if wait > p.cfg.MaxRetryDelay {
			lastErr = fmt.Errorf("%w (the endpoint asked to wait %v, more than the %v allowed)", err, wait.Round(time.Millisecond), p.cfg.MaxRetryDelay)
			break
		}
		wait = max(wait, backoff(attempt, p.cfg.MaxRetryDelay))
		if req.OnRetry != nil {
			req.OnRetry(attempt, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return model.Response{}, ctx.Err()
		case <-t.C:
		}
	}
	return model.Response{}, &model.Error{Reason: model.ReasonUnavailable, Status: status, Attempts: attempts, Err: lastErr}
}

// attempt makes one streaming HTTP request.
func (p *Provider) attempt(ctx context.Context, params oai.ChatCompletionNewParams, names nameMap, attempt int, onDelta func(model.Delta)) (model.Response, error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	var end doneWatch
	stream := p.client.Chat.Completions.NewStreaming(actx, params, option.WithMiddleware(end.middleware))
	defer stream.Close()
	var (
		resp     model.Response
		calls    = newAssembler(names)
		finished bool
		// toolsReason: the finish_reason says the model called tools.
		toolsReason bool
		usage       *model.Usage
		anns        []oai.ChatCompletionMessageAnnotation
	)
	for stream.Next() {
		chunk := stream.Current()
		if resp.Model == "" {
			resp.Model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			usage = &model.Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // n is 1: only choice 0 exists
			}
			// A refusal is the model's answer too (text, per model.Provider).
			if t := ch.Delta.Content + ch.Delta.Refusal; t != "" {
				resp.Chunks = append(resp.Chunks, schema.ChatMessage{Role: schema.RoleAssistant, Text: t})
				if onDelta != nil {
					onDelta(model.Delta{Attempt: attempt, Text: t})
				}
			}
			anns = append(anns, annotations(ch.Delta)...)
			for _, tc := range ch.Delta.ToolCalls {
				calls.add(tc)
			}
			if fc := ch.Delta.FunctionCall; fc.Name != "" || fc.Arguments != "" {
				calls.add(functionCall(fc))
			}
			if ch.FinishReason != "" {
				finished = true
				toolsReason = toolsReason || ch.FinishReason == "tool_calls" || ch.FinishReason == "function_call"
			}
		}
	}
	if err := stream.Err(); err != nil {
		return model.Response{}, err
	}
	folded, err := schema.FoldChunks(resp.Chunks...)
	if err != nil {
		return model.Response{}, err
	}
	resp.ToolCalls, resp.ToolCallsError = calls.result()
	if resp.ToolCallsError != "" && len(resp.ToolCalls) == 0 {
		// Not one call can be read, so there is none to tell the model
		// about: the attempt failed, like a cut stream.
		return model.Response{}, fmt.Errorf("%w: %s", errUnreadable, resp.ToolCallsError)
	}
	if toolsReason && len(resp.ToolCalls) == 0 && folded.Text == "" {
		return model.Response{}, errNoCalls
	}
	if !finished {
		// [DONE] without a finish_reason (seen from several servers): the
		// answer is whole when it has text or tool calls that can all be
		// read; with nothing usable, or without [DONE] (a cut stream), the
		// attempt is retried.
		usable := resp.ToolCallsError == "" && (folded.Text != "" || len(resp.ToolCalls) > 0)
		if !end.seen || !usable {
			if end.seen {
				return model.Response{}, errNoFinish
			}
			return model.Response{}, errStreamCut
		}
		p.log.WarnContext(ctx, "the model's stream ended with [DONE] but no finish_reason; its answer is taken as finished",
			"model", resp.Model, "text_bytes", len(folded.Text), "tool_calls", len(resp.ToolCalls))
	}
	resp.Text = folded.Text
	resp.Usage = usage
	if cs := citations(anns, folded.Text); len(cs) > 0 && len(resp.ToolCalls) == 0 {
		// The model's sources, anchored in the whole answer: the answer
		// becomes one chunk carrying them (anchors count from its start).
		chunk := schema.ChatMessage{Role: schema.RoleAssistant, Text: folded.Text}
		chunk.Meta.SetCitations(cs)
		resp.Chunks = []schema.ChatMessage{chunk}
	}
	return resp, nil
}

// doneWatch records whether a response body carried the stream's end
// marker, a "data: [DONE]" line (the SDK's stream ends the same way at
// [DONE] and at the end of the body, which a cut stream also reaches).
type doneWatch struct {
	// seen: the marker passed.
	seen bool
	// line holds the first bytes of the line being read.
	line []byte
}

// doneLines are the end marker's lines (SSE allows one space after the
// colon, or none).
var doneLines = [...]string{"data: [DONE]", "data:[DONE]"}

// middleware wraps the response body of the request to watch it.
func (w *doneWatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp != nil && resp.Body != nil {
		body := resp.Body
		if resp.StatusCode == http.StatusOK {
			body = &nullErrorReader{ReadCloser: body, r: bufio.NewReader(body)}
		}
		resp.Body = &doneReader{ReadCloser: body, w: w}
	}
	return resp, err
}

// nullErrorReader is a stream body with `"error": null` removed from
// each event's data. Some servers put that member in every chunk; the
// SDK's stream ends at any chunk that has an "error" member, null or not,
// so every stream from them would fail. An error that is not null is kept
// (the SDK then ends the stream with it and the attempt is retried).
type nullErrorReader struct {
	io.ReadCloser
	r *bufio.Reader
	// pending is what is left of the line read last.
	pending []byte
	err     error
}

func (r *nullErrorReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		var line []byte
		line, r.err = r.r.ReadBytes('\n')
		r.pending = dropNullError(line)
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// dropNullError returns an SSE line without a top-level `"error": null`
// member in its data; any other line as it is.
func dropNullError(line []byte) []byte {
	rest, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(rest, []byte(`"error"`)) {
		return line
	}
	body := bytes.TrimRight(rest, "\r\n")
	end := rest[len(body):]
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || string(m["error"]) != "null" {
		return line
	}
	delete(m, "error")
	b, err := json.Marshal(m)
	if err != nil {
		return line
	}
	return slices.Concat([]byte("data: "), b, end)
}

// doneReader is a body read through a doneWatch.
type doneReader struct {
	io.ReadCloser
	w *doneWatch
}

func (r *doneReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	w := r.w
	for _, b := range p[:n] {
		if b == '\n' || b == '\r' {
			w.line = w.line[:0]
			continue
		}
		if len(w.line) < len(doneLines[0]) {
			w.line = append(w.line, b)
			if l := string(w.line); l == doneLines[0] || l == doneLines[1] {
				w.seen = true
			}
		}
	}
	return n, err
}

// params builds the request body: settings, tools the agent may use, and
// the (trimmed) conversation.
func (p *Provider) params(req model.Request, s AgentSettings) (oai.ChatCompletionNewParams, nameMap, error) {
	names := nameMap{}
	params := oai.ChatCompletionNewParams{Model: shared.ChatModel(s.Model)}
	params.StreamOptions.IncludeUsage = oai.Bool(true)
	if s.Temperature != nil {
		params.Temperature = oai.Float(*s.Temperature)
	}
	if s.MaxTokens > 0 {
		params.MaxCompletionTokens = oai.Int(s.MaxTokens)
	}
	tools := slices.Clone(req.Tools)
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	toolTokens := 0
	for _, t := range tools {
		if s.Tools != nil && !slices.Contains(s.Tools, t.Name) {
			continue
		}
		var schemaObj map[string]any
		if len(t.InputSchema) > 0 {
			if err := json.Unmarshal(t.InputSchema, &schemaObj); err != nil {
				return params, nil, fmt.Errorf("tool %s: inputSchema: %w", t.Name, err)
			}
		}
		fn := shared.FunctionDefinitionParam{Name: names.add(t.Name), Parameters: schemaObj}
		if t.Description != "" {
			fn.Description = oai.String(t.Description)
		}
		params.Tools = append(params.Tools, oai.ChatCompletionFunctionTool(fn))
		toolTokens += (len(t.Name) + len(t.Description) + len(t.InputSchema)) / 4
	}
	msgs := req.Messages
	prompt := s.SystemPrompt
	if s.SuggestReplies {
		prompt = strings.TrimSpace(prompt + "\n\n" + suggestInstruction)
	}
	if prompt != "" {
		msgs = append([]model.Message{{Role: model.RoleSystem, Text: prompt}}, msgs...)
	}
	if s.ContextTokens > 0 {
		var err error
		if msgs, err = Trim(msgs, s.ContextTokens-int(s.MaxTokens)-toolTokens); err != nil {
			return params, nil, err
		}
	}
	k := caps{images: s.Images, audio: s.Audio}
	var media []oai.ChatCompletionContentPartUnionParam
	for i, m := range msgs {
		if m.Role == model.RoleTool {
			notes, parts := k.toolMedia(m)
			media = append(media, parts...)
			params.Messages = append(params.Messages, oai.ToolMessage(toolText(m, k, notes), m.ToolCallID))
		} else {
			params.Messages = append(params.Messages, message(m, k))
		}
		if len(media) > 0 && (i == len(msgs)-1 || msgs[i+1].Role != model.RoleTool) {
			// After the step's last tool message: its media, which a tool
			// message cannot carry.
			params.Messages = append(params.Messages, oai.UserMessage(append([]oai.ChatCompletionContentPartUnionParam{
				oai.TextContentPart("Media returned by the tool calls above (not written by the user):")}, media...)))
			media = nil
		}
	}
	return params, names, nil
}

// message converts one conversation entry other than a tool result (see
// params); k says which media the model takes.
func message(m model.Message, k caps) oai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case model.RoleSystem:
		return oai.SystemMessage(m.Text)
	case model.RoleAssistant:
		a := oai.ChatCompletionAssistantMessageParam{}
		if m.Text != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = oai.String(m.Text)
		}
		for _, tc := range m.ToolCalls {
			args := string(tc.Arguments)
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: APIName(tc.Name), Arguments: args}}})
		}
		return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}
	case model.RoleTool:
		return oai.ToolMessage(toolText(m, k, nil), m.ToolCallID)
	default:
		return userMessage(m, k)
	}
}

// userMessage is the user's text with the blocks of the message meant for
// the model: context references (resource links, with the entity they
// point to) and other blocks described as text, images and audio as
// content parts when the model takes them (k).
func userMessage(m model.Message, k caps) oai.ChatCompletionMessageParamUnion {
	if len(m.Content) == 0 && len(m.References) == 0 {
		return oai.UserMessage(m.Text)
	}
	var described schema.ContentList
	var parts []oai.ChatCompletionContentPartUnionParam
	for _, c := range m.Content {
		if p, ok := k.mediaPart(c); ok {
			parts = append(parts, p)
			continue
		}
		described = append(described, c)
	}
	text := m.Text
	if ctx := model.ContextText(described, true); ctx != "" {
		text += "\n\nContext:\n" + ctx
	}
	if refs := model.ReferencesText(m.References); refs != "" {
		text += "\n\n" + refs
	}
	if len(parts) == 0 {
		return oai.UserMessage(text)
	}
	return oai.UserMessage(append([]oai.ChatCompletionContentPartUnionParam{oai.TextContentPart(text)}, parts...))
}

// toolText is what the model reads of a tool result: the text the agent
// prepared, its other blocks described (images and audio the model takes
// are attached after the step's tool messages instead: notes say so),
// plus structuredContent whole (as JSON) when the tool returned one and
// the text does not already carry it.
func toolText(m model.Message, k caps, notes []string) string {
	text := m.Text
	if m.Result != nil {
		var described schema.ContentList
		for _, c := range m.Result.Content {
			if _, attached := k.mediaPart(c); !attached {
				described = append(described, c)
			}
		}
		lines := notes
		if ctx := model.ContextText(described, true); ctx != "" {
			lines = append([]string{ctx}, notes...)
		}
		if ctx := strings.Join(lines, "\n"); ctx != "" {
			if text != "" {
				text += "\n"
			}
			text += ctx
		}
	}
	if m.Result != nil && m.Result.StructuredContent != nil {
		if b, err := json.Marshal(m.Result.StructuredContent); err == nil && !containsJSON(text, b) {
			if text != "" {
				text += "\n"
			}
			text += "structuredContent: " + string(b)
		}
	}
	if text == "" {
		text = "(no output)"
	}
	return text
}

func containsJSON(text string, b []byte) bool {
	var a, c any
	return json.Unmarshal([]byte(text), &a) == nil && json.Unmarshal(b, &c) == nil && fmt.Sprint(a) == fmt.Sprint(c)
}

// suggestInstruction asks for suggested replies (AgentSettings.SuggestReplies).
const suggestInstruction = "When you give your final answer (not when calling tools), end it with one last line " +
	"\"Suggested replies: \" followed by up to 3 short messages the user might send next, separated by \" | \"."

// splitSuggestions removes a trailing "Suggested replies: a | b" line from
// text and returns the replies (at most 3, blank ones dropped).
func splitSuggestions(text string) (string, []string) {
	trimmed := strings.TrimRight(text, " \n")
	i := strings.LastIndex(trimmed, "\n") + 1
	line := trimmed[i:]
	rest, ok := strings.CutPrefix(strings.TrimLeft(line, "*_ "), "Suggested replies:")
	if !ok {
		return text, nil
	}
	var out []string
	for _, r := range strings.Split(rest, "|") {
		if r = strings.Trim(strings.TrimSpace(r), "*_\"`"); r != "" && len(out) < 3 {
			out = append(out, r)
		}
	}
	return strings.TrimRight(trimmed[:i], " \n"), out
}

// foldedCitations returns the citations of the folded chunks.
func foldedCitations(chunks []schema.ChatMessage) ([]schema.Citation, error) {
	f, err := schema.FoldChunks(chunks...)
	if err != nil {
		return nil, err
	}
	return f.Meta.Citations()
}

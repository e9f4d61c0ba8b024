// Package openai is a model.Provider for any OpenAI-compatible
// chat-completions endpoint (OpenAI, OpenRouter, Azure-style gateways,
// vLLM, Ollama, llama.cpp server, LM Studio), built on
// github.com/openai/openai-go/v3. It streams (server-sent events), offers
// parley's registered tools as functions, retries 429 and 5xx answers
// with backoff honouring Retry-After, never retries another 4xx, trims
// history that does not fit the model's context by a documented policy,
// and keeps no state between calls.
//
// Of parley's packages it imports only model and schema, and nothing of NATS
// (internal/layers checks the direction of imports).
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultTimeout       = 2 * time.Minute
	DefaultMaxRetries    = 3
	DefaultMaxRetryDelay = 30 * time.Second
)

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or
	// http://localhost:11434/v1 (Ollama). Required.
	BaseURL string
	// Model is the default model name. Required unless every agent of
	// Agents names its own.
	Model string
	// APIKey is sent as a bearer token (may be empty for local servers).
	APIKey string
	// Timeout bounds one HTTP attempt, stream included. Default 2m.
	Timeout time.Duration
	// MaxRetries is how many times a 429, a 5xx, a connection error or a
	// cut stream is retried (0 uses the default 3; negative: never).
	MaxRetries int
	// MaxRetryDelay caps one backoff pause. A Retry-After longer than it
	// ends the call (model_unavailable) instead of waiting. Default 30s.
	MaxRetryDelay time.Duration
	// Agents holds per-agent settings, by agent name.
	Agents Agents
	// Logger receives what the provider notices and works around (a
	// stream that ends without a finish_reason). Nil: slog.Default().
	Logger *slog.Logger
}

// Agents is the agents configuration file (JSON):
//
//	{"agents": {"default": {"systemPrompt": "You are…", "model": "gpt-4.1-mini",
//	   "temperature": 0.2, "maxTokens": 1024, "tools": ["list_entities"],
//	   "contextTokens": 128000}}}
//
// An agent not listed uses the Config's model, no system prompt, every
// registered tool and no trimming.
type Agents struct {
	// Agents maps an agent name to its settings.
	Agents map[string]AgentSettings `json:"agents"`
}

// AgentSettings are one agent's model settings.
type AgentSettings struct {
	// SystemPrompt is sent first, as a system message (optional).
	SystemPrompt string `json:"systemPrompt,omitempty"`
	// Model overrides Config.Model (optional).
	Model string `json:"model,omitempty"`
	// Temperature, 0 to 2 (optional; the endpoint's default when absent).
	Temperature *float64 `json:"temperature,omitempty"`
	// MaxTokens bounds the answer (max_completion_tokens; optional).
	MaxTokens int64 `json:"maxTokens,omitempty"`
	// Tools lists the tools the agent may call, by parley name. Absent:
	// every registered tool; empty list: none.
	Tools []string `json:"tools,omitempty"`
	// Images says the model takes images: image blocks meant for the
	// model are sent as image parts — a user message's in that message, a
	// tool result's in a user message right after the step's tool messages
	// (the API takes only text in a tool message), each named by its call.
	// Otherwise they are described as text (type and size).
	Images bool `json:"images,omitempty"`
	// Audio says the model takes audio input: wav and mp3 audio blocks are
	// sent as input_audio parts, like images; other audio, and all audio
	// when false, is described as text.
	Audio bool `json:"audio,omitempty"`
	// SuggestReplies asks the model to end a final answer with a line
	// "Suggested replies: a | b | c"; parley strips that line from the
	// answer and offers the replies (at most 3) under
	// _meta["drupal.org/ai.suggested_replies"]. The line still streams in
	// message.delta (the final message is authoritative).
	SuggestReplies bool `json:"suggestReplies,omitempty"`
	// ContextTokens is the model's context window in tokens. When set,
	// history is trimmed to fit (see Trim); 0 sends everything.
	ContextTokens int `json:"contextTokens,omitempty"`
}

// LoadAgents reads an agents configuration file; "" returns no settings.
// Unknown fields and out-of-range values are errors naming the agent and
// the field.
func LoadAgents(path string) (Agents, error) {
	if path == "" {
		return Agents{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Agents{}, fmt.Errorf("reading agents configuration: %w", err)
	}
	return ParseAgents(data)
}

// ParseAgents parses and checks an agents configuration (see Agents).
func ParseAgents(data []byte) (Agents, error) {
	var a Agents
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return Agents{}, fmt.Errorf("parsing agents configuration: %w", err)
	}
	return a, a.Validate()
}

// Validate checks every agent's settings.
func (a Agents) Validate() error {
	var errs []string
	for name, s := range a.Agents {
		if name == "" {
			errs = append(errs, "agents: an agent name is empty")
		}
		if t := s.Temperature; t != nil && (*t < 0 || *t > 2) {
			errs = append(errs, fmt.Sprintf("agents.%s.temperature: must be 0 to 2, got %v", name, *t))
		}
		if s.MaxTokens < 0 {
			errs = append(errs, fmt.Sprintf("agents.%s.maxTokens: must not be negative, got %d", name, s.MaxTokens))
		}
		if s.ContextTokens < 0 {
			errs = append(errs, fmt.Sprintf("agents.%s.contextTokens: must not be negative, got %d", name, s.ContextTokens))
		}
		if s.ContextTokens > 0 && s.MaxTokens >= int64(s.ContextTokens) {
			errs = append(errs, fmt.Sprintf("agents.%s.maxTokens: must be less than contextTokens (%d), got %d", name, s.ContextTokens, s.MaxTokens))
		}
		for i, t := range s.Tools {
			if t == "" {
				errs = append(errs, fmt.Sprintf("agents.%s.tools[%d]: must not be empty", name, i))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("agents configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// settings returns agent's settings with the model filled in.
func (c *Config) settings(agent string) AgentSettings {
	s := c.Agents.Agents[agent]
	if s.Model == "" {
		s.Model = c.Model
	}
	return s
}

// check validates c and fills in defaults.
func (c *Config) check() error {
	if c.BaseURL == "" {
		return fmt.Errorf("model URL: required")
	}
	if !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		return fmt.Errorf("model URL: %q must start with http:// or https://", c.BaseURL)
	}
	if c.Model == "" {
		for name, s := range c.Agents.Agents {
			if s.Model == "" {
				return fmt.Errorf("model: required (agent %q names none)", name)
			}
		}
		if len(c.Agents.Agents) == 0 {
			return fmt.Errorf("model: required")
		}
	}
	if c.Timeout < 0 || c.MaxRetryDelay < 0 {
		return fmt.Errorf("model timeout and retry delay: must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	return c.Agents.Validate()
}

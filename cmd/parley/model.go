package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/model/openai"
)

// modelFlags choose the agent's model: an OpenAI-compatible endpoint, or
// (without --model-url) the scripted rules model.
type modelFlags struct {
	ModelURL        string        `name:"model-url" env:"PARLEY_MODEL_URL" help:"OpenAI-compatible API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1; unset: the scripted model."`
	Model           string        `name:"model" env:"PARLEY_MODEL" help:"Model name (default of every agent; the agents file may override it)."`
	ModelAPIKeyFile string        `name:"model-api-key-file" type:"existingfile" help:"File holding the API key (else env PARLEY_MODEL_API_KEY, then OPENAI_API_KEY)."`
	Agents          string        `name:"agents" env:"PARLEY_AGENTS" type:"existingfile" help:"Agents configuration (JSON): per-agent system prompt, model, temperature, max tokens, tools allowed, context size."`
	ModelTimeout    time.Duration `name:"model-timeout" env:"PARLEY_MODEL_TIMEOUT" default:"2m" help:"Bound on one model HTTP attempt, stream included."`
	ModelRetries    int           `name:"model-retries" env:"PARLEY_MODEL_RETRIES" default:"3" help:"Retries of a 429, 5xx, connection error or cut stream (0: none)."`
}

func (m modelFlags) check() error {
	if m.ModelURL == "" {
		if m.Model != "" || m.ModelAPIKeyFile != "" || m.Agents != "" {
			return fmt.Errorf("--model, --model-api-key-file and --agents need --model-url (without it the scripted model runs)")
		}
		return nil
	}
	if m.ModelTimeout <= 0 {
		return fmt.Errorf("--model-timeout must be positive, got %v", m.ModelTimeout)
	}
	if m.ModelRetries < 0 || m.ModelRetries > 10 {
		return fmt.Errorf("--model-retries must be 0 to 10, got %d", m.ModelRetries)
	}
	if _, err := openai.LoadAgents(m.Agents); err != nil {
		return fmt.Errorf("--agents: %w", err)
	}
	_, err := m.provider("", nil)
	return err
}

// apiKey returns the key from --model-api-key-file, PARLEY_MODEL_API_KEY
// or OPENAI_API_KEY, in that order ("" for none: local servers).
func (m modelFlags) apiKey() (string, error) {
	if m.ModelAPIKeyFile != "" {
		b, err := os.ReadFile(m.ModelAPIKeyFile)
		if err != nil {
			return "", fmt.Errorf("--model-api-key-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if k := os.Getenv("PARLEY_MODEL_API_KEY"); k != "" {
		return k, nil
	}
	return os.Getenv("OPENAI_API_KEY"), nil
}

// newProvider returns the agent's model: the OpenAI-compatible provider
// (logging to log) when --model-url is set, else the scripted model of
// --rules.
func newProvider(a agentFlags, log *slog.Logger) (model.Provider, error) {
	m := a.modelFlags
	if m.ModelURL == "" {
		return model.LoadScripted(a.Rules)
	}
	key, err := m.apiKey()
	if err != nil {
		return nil, err
	}
	return m.provider(key, log)
}

// provider builds the OpenAI-compatible provider with key, logging to log
// (nil: slog.Default()).
func (m modelFlags) provider(key string, log *slog.Logger) (*openai.Provider, error) {
	agents, err := openai.LoadAgents(m.Agents)
	if err != nil {
		return nil, err
	}
	if m.Model == "" && len(agents.Agents) == 0 {
		return nil, errors.New("--model: required with --model-url (or PARLEY_MODEL; or a model for each agent in the --agents file)")
	}
	retries := m.ModelRetries
	if retries == 0 {
		retries = -1 // openai.Config: negative means none
	}
	return openai.New(openai.Config{BaseURL: m.ModelURL, Model: m.Model, APIKey: key, Timeout: m.ModelTimeout,
		MaxRetries: retries, Agents: agents, Logger: log}, nil)
}

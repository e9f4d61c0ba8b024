package kvstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/internal/retry"
	"github.com/parley-dev/parley/schema"
)

// ToolRegistry is the bucket of trusted tool definitions (parley_tools, key
// = tool name), written by tool-executors at start-up and read by agents and
// policy services.
type ToolRegistry struct {
	b   *Bucket[schema.Tool]
	log *slog.Logger

	mu       sync.Mutex
	cached   []schema.Tool
	cachedAt time.Time
}

// listTTL is how long List reuses its last answer: listing keys costs the
// server a consumer, and tool definitions change only when a tool-executor
// starts.
const listTTL = 2 * time.Second

// OpenTools creates or updates the tool registry bucket.
func OpenTools(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType, replicas int) (*ToolRegistry, error) {
	b, err := OpenBucket[schema.Tool](ctx, js, BucketTools, BucketOptions{Storage: storage, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	return &ToolRegistry{b: b, log: slog.New(slog.DiscardHandler)}, nil
}

// MaxToolDefinitionBytes bounds one encoded tool definition. Every
// definition is sent to the model on every step, so a larger one is
// refused at registration.
const MaxToolDefinitionBytes = 64 << 10

// SetLogger sets where the registry reports definitions it cannot read
// (default: discard).
func (r *ToolRegistry) SetLogger(l *slog.Logger) {
	if l != nil {
		r.log = l
	}
}

// Register validates t (schema.ValidateTool: name, inputSchema,
// outputSchema, _meta) and stores it under its name. A definition that
// breaks a rule, or whose encoding exceeds MaxToolDefinitionBytes, is
// refused with an error naming the tool, the field and the rule; nothing
// is stored.
func (r *ToolRegistry) Register(ctx context.Context, t schema.Tool) error {
	if err := schema.ValidateTool(&t); err != nil {
		return fmt.Errorf("registering tool %q: %w", t.Name, err)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("registering tool %q: %w", t.Name, err)
	}
	if len(data) > MaxToolDefinitionBytes {
		return fmt.Errorf("registering tool %q: definition is %d bytes, more than the limit of %d", t.Name, len(data), MaxToolDefinitionBytes)
	}
	_, err = r.b.Put(ctx, t.Name, t)
	return err
}

// Get returns the definition of the tool name, or ErrNotFound. An
// unreadable optional member (annotations, _meta, title, description) is
// treated as absent and logged (see schema.DecodeToolTolerant): without
// annotations a tool counts as destructive, so gating asks for
// confirmation. A definition unreadable even so is an error wrapping
// ErrIncompatible.
func (r *ToolRegistry) Get(ctx context.Context, name string) (*schema.Tool, error) {
	gctx, cancel := retry.WithRequestTimeout(ctx)
	defer cancel()
	e, err := r.b.kv.Get(gctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", BucketTools, name, err)
	}
	t, err := r.decode(ctx, name, e.Value())
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Lookup is Get served from List's cached answer while it is fresh (up to
// two seconds old, as List's): the agent asks for the definition of each
// tool call right after listing the tools for the model step. A name the
// fresh cache lacks (registered since, or unreadable), or no fresh cache,
// is read with Get, with Get's errors. Callers must not modify the result.
func (r *ToolRegistry) Lookup(ctx context.Context, name string) (*schema.Tool, error) {
	r.mu.Lock()
	if len(r.cached) > 0 && time.Since(r.cachedAt) < listTTL {
		i := sort.Search(len(r.cached), func(i int) bool { return r.cached[i].Name >= name })
		if i < len(r.cached) && r.cached[i].Name == name {
			t := &r.cached[i]
			r.mu.Unlock()
			return t, nil
		}
	}
	r.mu.Unlock()
	return r.Get(ctx, name)
}

// decode reads one stored definition tolerantly, logging what it ignored.
func (r *ToolRegistry) decode(ctx context.Context, key string, data []byte) (schema.Tool, error) {
	t, ignored, err := schema.DecodeToolTolerant(data)
	if err != nil {
		r.log.ErrorContext(ctx, "unreadable tool definition", "bucket", BucketTools, "key", key, "error", err)
		return t, fmt.Errorf("decoding %s/%s: %w (%w)", BucketTools, key, err, ErrIncompatible)
	}
	if t.Name != key {
		r.log.ErrorContext(ctx, "tool definition stored under another name", "bucket", BucketTools, "key", key, "name", t.Name)
		return t, fmt.Errorf("decoding %s/%s: name %q does not match the key (%w)", BucketTools, key, t.Name, ErrIncompatible)
	}
	for _, v := range ignored {
		r.log.ErrorContext(ctx, "tool definition member unreadable; treated as absent", "bucket", BucketTools,
			"key", key, "violation", v.String())
	}
	return t, nil
}

// List returns every readable registered tool, sorted by name; a
// definition Get cannot read is skipped (and logged). A non-empty answer
// is reused for up to two seconds; callers must not modify it.
func (r *ToolRegistry) List(ctx context.Context) ([]schema.Tool, error) {
	r.mu.Lock()
	if len(r.cached) > 0 && time.Since(r.cachedAt) < listTTL {
		out := r.cached
		r.mu.Unlock()
		return out, nil
	}
	r.mu.Unlock()
	out, err := r.list(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cached, r.cachedAt = out, time.Now()
	r.mu.Unlock()
	return out, nil
}

func (r *ToolRegistry) list(ctx context.Context) ([]schema.Tool, error) {
	// The key listing is one ordered consumer: bounded like any request
	// (a lost reply fails it), and a listing cut short by the bound is
	// an error, never a shorter list.
	lctx, cancel := retry.WithRequestTimeout(ctx)
	defer cancel()
	lister, err := r.b.kv.ListKeys(lctx)
	if err != nil {
		return nil, fmt.Errorf("listing tools: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if err := lctx.Err(); err != nil {
		return nil, fmt.Errorf("listing tools: %w", err)
	}
	var out []schema.Tool
	for _, k := range keys {
		t, err := r.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if errors.Is(err, ErrIncompatible) {
			continue // logged by Get; the other tools keep working
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

package kvstate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/schema"
)

// ToolRegistry is the bucket of trusted tool definitions (parley_tools, key
// = tool name), written by tool-executors at start-up and read by agents and
// policy services.
type ToolRegistry struct {
	b *Bucket[schema.Tool]

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
	return &ToolRegistry{b: b}, nil
}

// Register stores the definition of t under its name.
func (r *ToolRegistry) Register(ctx context.Context, t schema.Tool) error {
	_, err := r.b.Put(ctx, t.Name, t)
	return err
}

// Get returns the definition of the tool name, or ErrNotFound.
func (r *ToolRegistry) Get(ctx context.Context, name string) (*schema.Tool, error) {
	t, _, err := r.b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// List returns every registered tool, sorted by name. A non-empty answer
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
	lister, err := r.b.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing tools: %w", err)
	}
	var out []schema.Tool
	for k := range lister.Keys() {
		t, _, err := r.b.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

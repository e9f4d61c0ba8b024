package processor

import (
	"context"
	"errors"

	"github.com/parley-dev/parley/kvstate"
)

// pausedCache is the paused store with the records this replica last
// read or wrote cached with their KV revision, under the same rules as the
// thread cache (threads): a write from a cached record is
// revision-checked (a conflict, an expiry or a delete since fails it and
// the record is read again), and anything but a write decided on a cached
// record (no change, a refusal) is decided again on a fresh read. Only
// content known to be stored is cached: what Load read, what a write
// wrote. Load and Delete go to the bucket.
type pausedCache struct {
	pausedStore
	cache *revCache[kvstate.PausedTurn] // nil: caching off
}

func newPausedCache(s pausedStore, cache bool) *pausedCache {
	return &pausedCache{pausedStore: s, cache: newRevCache[kvstate.PausedTurn](cache)}
}

// Load reads the record from the bucket (see kvstate.PausedStore.Load).
func (c *pausedCache) Load(ctx context.Context, thread string) (*kvstate.PausedTurn, uint64, error) {
	p, rev, err := c.pausedStore.Load(ctx, thread)
	if err != nil {
		c.forget(thread)
	} else {
		c.remember(p, rev)
	}
	return p, rev, err
}

// Save stores p (see kvstate.PausedStore.Save). When the cached record
// is one p replaces (kvstate.CheckReplace), p is written at its revision
// in one write; any other case, or a failed write, is Save's.
func (c *pausedCache) Save(ctx context.Context, p *kvstate.PausedTurn) (uint64, error) {
	if old, rev, ok := c.lookup(p.Thread); ok {
		p.Format = kvstate.PausedFormat
		if kvstate.CheckReplace(old, p) == nil {
			if nrev, err := c.pausedStore.Update(ctx, p, rev); err == nil {
				c.remember(p, nrev)
				return nrev, nil
			}
		}
	}
	// Save may leave a record other than p (a redelivered pause):
	// nothing is cached.
	c.forget(p.Thread)
	return c.pausedStore.Save(ctx, p)
}

// Mutate is kvstate.PausedStore.Mutate starting from the cached record.
func (c *pausedCache) Mutate(ctx context.Context, thread string, fn func(p *kvstate.PausedTurn) error) (*kvstate.PausedTurn, error) {
	var from *kvstate.Versioned[kvstate.PausedTurn]
	if p, rev, ok := c.lookup(thread); ok {
		from = &kvstate.Versioned[kvstate.PausedTurn]{Value: p, Rev: rev}
	}
	first := from != nil
	v, err := kvstate.Mutate(ctx, "the paused turn of "+thread, kvstate.Mutator[kvstate.PausedTurn]{
		Load: func(ctx context.Context) (*kvstate.PausedTurn, uint64, error) { return c.pausedStore.Load(ctx, thread) },
		Save: func(ctx context.Context, p *kvstate.PausedTurn, rev uint64) (uint64, error) {
			return c.pausedStore.Update(ctx, p, rev)
		},
	}, from, func(p *kvstate.PausedTurn) error {
		err := fn(p)
		if first && err != nil {
			err = errCachedNoChange // decide again on a fresh read
		}
		first = false
		return err
	})
	if errors.Is(err, errCachedNoChange) {
		c.forget(thread)
		return c.Mutate(ctx, thread, fn)
	}
	if err != nil {
		c.forget(thread)
		return nil, err
	}
	c.remember(v.Value, v.Rev)
	return v.Value, nil
}

// Delete removes the record if still at rev.
func (c *pausedCache) Delete(ctx context.Context, thread string, rev uint64) error {
	c.forget(thread)
	return c.pausedStore.Delete(ctx, thread, rev)
}

func (c *pausedCache) lookup(thread string) (*kvstate.PausedTurn, uint64, bool) {
	return c.cache.get(thread)
}

func (c *pausedCache) remember(p *kvstate.PausedTurn, rev uint64) {
	if p != nil {
		c.cache.put(p.Thread, p, rev)
	}
}

func (c *pausedCache) forget(thread string) { c.cache.drop(thread) }

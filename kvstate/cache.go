package kvstate

import (
	"encoding/json"
	"sync"
)

// MaxCached bounds a Store's cache (StoreOptions.Cache). At the
// bound an arbitrary entry is dropped; a miss costs one KV read.
const MaxCached = 4096

// revCache keeps records by key with their KV revision, as JSON so that
// no caller shares a cached value: get returns a fresh copy. A nil
// *revCache caches nothing. What the cache may be trusted with is
// Store's rule (StoreOptions.Cache).
type revCache[T any] struct {
	mu sync.Mutex
	m  map[string]cachedRecord
}

type cachedRecord struct {
	data []byte
	rev  uint64
}

// newRevCache returns a cache, or nil (caching off) when !on.
func newRevCache[T any](on bool) *revCache[T] {
	if !on {
		return nil
	}
	return &revCache[T]{m: make(map[string]cachedRecord)}
}

// get returns a copy of the record cached under key and its revision.
func (c *revCache[T]) get(key string) (*T, uint64, bool) {
	if c == nil {
		return nil, 0, false
	}
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	var v T
	if json.Unmarshal(e.data, &v) != nil {
		c.drop(key)
		return nil, 0, false
	}
	return &v, e.rev, true
}

// put caches v under key at revision rev, unless a later revision is
// cached already.
func (c *revCache[T]) put(key string, v *T, rev uint64) {
	if c == nil || v == nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		c.drop(key)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[key]
	switch {
	case ok && old.rev > rev:
		return
	case !ok && len(c.m) >= MaxCached:
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = cachedRecord{data: data, rev: rev}
}

// drop forgets key.
func (c *revCache[T]) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

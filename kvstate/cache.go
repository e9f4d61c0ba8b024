package kvstate

import (
	"encoding/json"
	"sync"
)

// MaxCached bounds a Store's cache (StoreOptions.Cache). At the
// bound an arbitrary entry is dropped; a miss costs one KV read.
const MaxCached = 4096

// RevCache keeps records by key with their KV revision, as JSON so that
// no caller shares a cached value: Get returns a fresh copy. A nil
// *RevCache caches nothing. What a cache may be trusted with is its
// user's rule (Store's: StoreOptions.Cache). At MaxCached entries an
// arbitrary one is dropped.
type RevCache[T any] struct {
	mu sync.Mutex
	m  map[string]cachedRecord
}

type cachedRecord struct {
	data []byte
	rev  uint64
}

// NewRevCache returns a cache, or nil (caching off) when !on.
func NewRevCache[T any](on bool) *RevCache[T] {
	if !on {
		return nil
	}
	return &RevCache[T]{m: make(map[string]cachedRecord)}
}

// Get returns a copy of the record cached under key and its revision.
func (c *RevCache[T]) Get(key string) (*T, uint64, bool) {
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
		c.Drop(key)
		return nil, 0, false
	}
	return &v, e.rev, true
}

// Put caches v under key at revision rev, unless a later revision is
// cached already.
func (c *RevCache[T]) Put(key string, v *T, rev uint64) {
	if c == nil || v == nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		c.Drop(key)
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

// Drop forgets key.
func (c *RevCache[T]) Drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

package kvstate

import (
	"fmt"
	"testing"
)

// A RevCache is bounded (MaxCached), keeps the newest revision, and hands
// out copies.
func TestRevCacheBounded(t *testing.T) {
	c := NewRevCache[rec](true)
	for i := range MaxCached + 100 {
		c.Put(fmt.Sprint("k", i), &rec{N: i}, 1)
	}
	if n := len(c.m); n != MaxCached {
		t.Errorf("%d entries, want the bound %d", n, MaxCached)
	}
	c.Put("x", &rec{S: "new"}, 5)
	c.Put("x", &rec{S: "old"}, 4)
	got, rev, ok := c.Get("x")
	if !ok || rev != 5 || got.S != "new" {
		t.Fatalf("Get = %+v @%d %v, want the newer revision 5", got, rev, ok)
	}
	got.S = "changed"
	if again, _, _ := c.Get("x"); again.S != "new" {
		t.Error("a caller's change reached the cache")
	}
	if _, _, ok := NewRevCache[rec](false).Get("x"); ok {
		t.Error("a cache that is off returned a record")
	}
}

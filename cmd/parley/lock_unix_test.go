//go:build unix

package main

import (
	"strings"
	"testing"
)

// Two `parley dev` cannot share one --data-dir.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another parley dev") {
		t.Fatalf("second lock: err = %v, want in use", err)
	}
	unlock()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}

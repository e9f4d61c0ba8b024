//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive, non-blocking lock on dir/parley.lock so
// two `parley dev` never share one JetStream store; unlock releases it (the
// kernel also releases it when the process exits).
func lockDataDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "parley.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data-dir %s is in use by another parley dev (%s is locked); stop it or pass another --data-dir", dir, path)
		}
		return nil, fmt.Errorf("data-dir: locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

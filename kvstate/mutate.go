package kvstate

import (
	"context"
	"errors"
	"fmt"
)

// Versioned is a value as read from a bucket and its revision (0: the key
// did not exist).
type Versioned[T any] struct {
	Value *T
	Rev   uint64
}

// Mutator says how Mutate reads and writes one kind of record: Load
// returns the current value and revision (a missing key is the caller's
// choice: a fresh value at revision 0, or an error such as ErrNotFound),
// and Save writes v if the key is still at rev (0: must not exist),
// failing with ErrConflict otherwise, and returns the new revision. Save
// keeps whatever TTL the record must carry.
type Mutator[T any] struct {
	Load func(ctx context.Context) (*T, uint64, error)
	Save func(ctx context.Context, v *T, rev uint64) (uint64, error)
}

// Mutate is parley's one read-modify-write loop: it reads the record
// (or starts from from, when given, as an earlier read returned it),
// applies fn and saves the result at the revision read, reading again and
// reapplying fn on ErrConflict, up to MaxMutateAttempts. fn may run more
// than once and must only change its argument. When fn returns
// ErrNoChange nothing is written and Mutate returns the value fn saw, its
// revision and nil; any other error of fn, Load or Save is returned as
// is. what names the record in the error.
func Mutate[T any](ctx context.Context, what string, m Mutator[T], from *Versioned[T], fn func(v *T) error) (Versioned[T], error) {
	for range MaxMutateAttempts {
		var cur Versioned[T]
		if from != nil {
			cur, from = *from, nil
		} else {
			v, rev, err := m.Load(ctx)
			if err != nil {
				return Versioned[T]{}, err
			}
			cur = Versioned[T]{Value: v, Rev: rev}
		}
		if err := fn(cur.Value); err != nil {
			if errors.Is(err, ErrNoChange) {
				return cur, nil
			}
			return Versioned[T]{}, err
		}
		rev, err := m.Save(ctx, cur.Value, cur.Rev)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return Versioned[T]{}, err
		}
		return Versioned[T]{Value: cur.Value, Rev: rev}, nil
	}
	return Versioned[T]{}, fmt.Errorf("updating %s: too many concurrent writers: %w", what, ErrConflict)
}

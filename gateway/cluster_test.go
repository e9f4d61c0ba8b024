package gateway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/bus/bustest"
)

// On a replicated bucket (R3) the server reports a lost compare-and-set
// as API error 10164, not 10071: two gateway replicas giving way to each
// other must read it as the other replica's write, never as a failure.
// Here four replicas release the same refused claim at once (the
// processor's verdict seen by each): one deletes it, the others find it
// gone and are done; and two grant a share of one thread at once: both
// grants are kept.
func TestOwnershipRacesOnReplicatedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := bustest.NewCluster(t, 3)
	replica := func() *ownership {
		b, err := bus.New(cl.Connect(t), &bus.Options{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EnsureStreams(t.Context()); err != nil {
			t.Fatal(err)
		}
		g, err := New(t.Context(), b, StaticTokens{devTok: "dev"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		return g.owners
	}
	a, b := replica(), replica()
	replicas := []*ownership{a, b, replica(), replica()}

	// Release races: every replica releases the same refused claim at
	// once, so deletes of one key are in flight together (where an R3
	// stream answers 10164).
	for i := range 20 {
		thread := fmt.Sprintf("refused-%d", i)
		r, err := a.createClaim(t.Context(), thread, "dev", "", "")
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, len(replicas))
		start := make(chan struct{})
		for _, o := range replicas {
			go func() {
				<-start
				errs <- o.release(t.Context(), thread, "dev", r)
			}()
		}
		close(start)
		for range replicas {
			if err := <-errs; err != nil {
				t.Fatalf("%s: a replica's release of a claim another released at once: %v (a lost compare-and-set taken for a failure)", thread, err)
			}
		}
		if _, err := a.get(t.Context(), thread); !errors.Is(err, errNotOwner) {
			t.Fatalf("%s: claim after the releases: %v, want gone", thread, err)
		}
	}

	if _, err := a.createClaim(t.Context(), "shared", "dev", "", ""); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for o, user := range map[*ownership]string{a: "eve", b: "mallory"} {
		go func() {
			_, err := o.share(t.Context(), "shared", "dev", user, true)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent share: %v", err)
		}
	}
	got, err := a.get(t.Context(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Shared) != 2 {
		t.Errorf("shares after two concurrent grants: %v, want eve and mallory", got.Shared)
	}
}

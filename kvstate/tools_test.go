package kvstate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/schema"
)

// TestToolRegistryUnreadableDefinition: one bad
// definition in parley_tools ("readOnlyHint": "true") must not take every
// tool down. Register refuses it with the rule; read back, its annotation
// counts as absent; a definition unreadable even so is skipped by List and
// the others keep working.
func TestToolRegistryUnreadableDefinition(t *testing.T) {
	ctx := t.Context()
	js := newJS(t)
	reg, err := OpenTools(ctx, js, jetstream.MemoryStorage, 1)
	if err != nil {
		t.Fatal(err)
	}
	good := schema.Tool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &schema.ToolAnnotations{ReadOnlyHint: schema.Bool(true)}}
	if err := reg.Register(ctx, good); err != nil {
		t.Fatal(err)
	}
	// Refused at registration, with the field and the rule.
	err = reg.Register(ctx, schema.Tool{Name: "bad name", InputSchema: json.RawMessage(`{"type":"array"}`)})
	if err == nil || !strings.Contains(err.Error(), "inputSchema.type") || !strings.Contains(err.Error(), "name:") {
		t.Errorf("Register(invalid) = %v, want the name and inputSchema.type rules", err)
	}
	big := good
	big.Name, big.Description = "big", strings.Repeat("x", MaxToolDefinitionBytes)
	if err := reg.Register(ctx, big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Register(oversize) = %v, want the size limit", err)
	}
	// Written behind the registry's back (another version, a hand edit).
	kv := reg.b.KV()
	if _, err := kv.Put(ctx, "wipe", []byte(`{"name":"wipe","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":"true"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "broken", []byte(`{"name":5}`)); err != nil {
		t.Fatal(err)
	}
	wipe, err := reg.Get(ctx, "wipe")
	if err != nil {
		t.Fatalf("Get(wipe) = %v, want the definition without its unreadable annotations", err)
	}
	if wipe.Annotations != nil || !schema.ConfirmByAnnotation(wipe.Annotations) {
		t.Errorf("wipe annotations = %+v, want absent (confirm)", wipe.Annotations)
	}
	if _, err := reg.Get(ctx, "broken"); !errors.Is(err, ErrIncompatible) {
		t.Errorf("Get(broken) = %v, want ErrIncompatible", err)
	}
	list, err := reg.list(ctx)
	if err != nil {
		t.Fatalf("List = %v, want the readable tools", err)
	}
	var names []string
	for _, tl := range list {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "lookup,wipe" {
		t.Errorf("List names = %s, want lookup,wipe", got)
	}
}

// Lookup answers from List's fresh cache without reading the bucket (a
// definition deleted since is still served, for up to listTTL), and reads
// a name the cache lacks.
func TestToolRegistryLookupUsesListCache(t *testing.T) {
	ctx := t.Context()
	reg, err := OpenTools(ctx, newJS(t), jetstream.MemoryStorage, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := schema.Tool{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`)}
	if err := reg.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.List(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reg.b.kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, err := reg.Lookup(ctx, "a"); err != nil || got.Name != "a" {
		t.Errorf("Lookup(a) from the cache = %v, %v; want the cached definition", got, err)
	}
	b := schema.Tool{Name: "b", InputSchema: json.RawMessage(`{"type":"object"}`)}
	if err := reg.Register(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got, err := reg.Lookup(ctx, "b"); err != nil || got.Name != "b" {
		t.Errorf("Lookup(b), registered after the listing = %v, %v; want it read from the bucket", got, err)
	}
	if _, err := reg.Lookup(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(c) = %v, want ErrNotFound", err)
	}
}

package builtin

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/kvstate"
)

// Entity types and statuses.
const (
	TypeArticle = "article"
	TypePage    = "page"
	TypeEvent   = "event"

	StatusDraft     = "draft"
	StatusPublished = "published"
)

// DefaultBucket is the KV bucket OpenSite uses when SiteOptions.Bucket is empty.
const DefaultBucket = "parley_content"

// DefaultBaseURL is the site URL entity links point into when
// SiteOptions.BaseURL is empty: an entity's link is <base>/node/<id>.
const DefaultBaseURL = "https://site.example"

// ErrNotFound is returned by Site.Entity when no live entity has the ID
// (never created, deleted, or not a valid entity ID).
var ErrNotFound = errors.New("builtin: entity not found")

// Entity is one piece of site content, stored as JSON under "entity.<id>".
type Entity struct {
	// ID is unique and matches [A-Za-z0-9_-]+, e.g. "article-3", "page-1".
	ID string `json:"id"`
	// Type is TypeArticle, TypePage or TypeEvent; it is also the bundle.
	Type string `json:"type"`
	// Title is the human-readable title.
	Title string `json:"title"`
	// Status is StatusDraft or StatusPublished.
	Status string `json:"status"`
	// Body is the plain-text body.
	Body string `json:"body,omitempty"`
	// Date is the day of an event, "YYYY-MM-DD"; empty for other types.
	Date string `json:"date,omitempty"`
	// Created is when the entity was created (UTC).
	Created time.Time `json:"created"`
	// Owner, when set, makes the entity private to that person (the
	// onBehalfOf end user, or the principal when none): only they find it
	// in the lookup and may reference it in a message
	// (events.SubjectResolveReferences). The tools, which run for the
	// agent and not for a person, see only entities without an owner.
	// Optional; the fixture's entities have none.
	Owner string `json:"owner,omitempty"`
}

// VisibleTo reports whether person may see e: e has no owner, or person
// is its owner.
func (e Entity) VisibleTo(person string) bool { return e.Owner == "" || e.Owner == person }

// LedgerEntry is one recorded effect of a mutating tool call: exactly one
// per CallID that changed (or was planned to change) the site.
type LedgerEntry struct {
	// CallID is the model's tool-call ID of the effecting execution.
	CallID string `json:"call_id"`
	// Tool is the tool name, e.g. "delete_entities".
	Tool string `json:"tool"`
	// IDs are the entities affected (created, published or deleted), in
	// argument order.
	IDs []string `json:"ids"`
	// At is when the effect was first recorded (UTC).
	At time.Time `json:"at"`
}

// SiteOptions configures OpenSite. A nil *SiteOptions means all defaults.
type SiteOptions struct {
	// Bucket is the KV bucket name ([A-Za-z0-9_-]). Optional. Default:
	// DefaultBucket ("parley_content").
	Bucket string
	// Storage is the bucket's storage. Optional. Default:
	// jetstream.FileStorage (the zero value).
	Storage jetstream.StorageType
	// Replicas is the bucket's replica count. Optional. Default: 1.
	Replicas int
	// BaseURL is the site URL that entity links (resource_link uri) point
	// into, without a trailing slash. Optional. Default: DefaultBaseURL.
	BaseURL string
}

// Site is the content store: a KV bucket seeded with the embedded fixture.
// It is safe for concurrent use, also by many processes sharing the bucket.
type Site struct {
	kv jetstream.KeyValue
	// raw, entities and ledger are the same bucket: entities
	// ("entity.<id>") and ledger records ("ledger.<call>") go through
	// their kvstate.Store.
	raw      *kvstate.Bucket[json.RawMessage]
	entities *kvstate.Store[Entity]
	ledger   *kvstate.Store[ledgerRecord]
	baseURL  string
	now      func() time.Time
}

//go:embed fixture/site.json
var fixtureJSON []byte

// Keys in the bucket.
const (
	entityPrefix = "entity."
	ledgerPrefix = "ledger."
	seededKey    = "meta.seeded"
)

// validID matches entity IDs: one KV key token.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func entityKey(id string) string { return entityPrefix + id }

// ledgerKey maps any CallID to a valid, collision-free KV key.
func ledgerKey(callID string) string {
	if validID.MatchString(callID) {
		return ledgerPrefix + callID
	}
	sum := sha256.Sum256([]byte(callID))
	return ledgerPrefix + "x." + hex.EncodeToString(sum[:])
}

// eventID derives the ID of the event a create_event call creates.
func eventID(callID string) string {
	sum := sha256.Sum256([]byte(callID))
	return TypeEvent + "-" + hex.EncodeToString(sum[:])[:12]
}

// OpenSite creates or updates the content bucket (CreateOrUpdateKeyValue,
// History 1) and seeds the embedded fixture unless "meta.seeded" exists.
// Seeding is idempotent under concurrent starters: every entity is written
// only if its key never held a value (so an entity deleted meanwhile is not
// brought back), then the marker is created; existing keys are skipped.
// It returns the errors of the bucket and KV calls, wrapped; js must not
// be nil.
func OpenSite(ctx context.Context, js jetstream.JetStream, opts *SiteOptions) (*Site, error) {
	if js == nil {
		panic("builtin: OpenSite with nil JetStream")
	}
	var o SiteOptions
	if opts != nil {
		o = *opts
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      o.Bucket,
		Description: "parley built-in demo site content",
		History:     1,
		Storage:     o.Storage,
		Replicas:    o.Replicas,
	}
	// Opening and seeding are retried (a lost creation race, a replicated
	// bucket whose leader is still being elected: "no responders") until
	// the start-up deadline of ctx (bus.WithStartupPolicy), like every
	// bucket; seeding is idempotent.
	var s *Site
	err := bus.Retry(ctx, "opening content bucket "+o.Bucket, bus.StartupPolicy(ctx, bus.RetryPolicy{}), func(ctx context.Context) error {
		kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			return err
		}
		s = siteOver(js, kv, strings.TrimRight(o.BaseURL, "/"))
		return s.seed(ctx)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// siteOver returns the Site over the content bucket kv of js.
func siteOver(js jetstream.JetStream, kv jetstream.KeyValue, baseURL string) *Site {
	raw := kvstate.BucketOf[json.RawMessage](js, kv)
	return &Site{kv: bus.BoundedKV(kv), raw: raw,
		entities: kvstate.NewStore(raw, kvstate.StoreOptions[Entity]{Name: "entity"}),
		ledger:   kvstate.NewStore(raw, kvstate.StoreOptions[ledgerRecord]{Name: "ledger"}),
		baseURL:  baseURL, now: func() time.Time { return time.Now().UTC() }}
}

func (s *Site) seed(ctx context.Context) error {
	if _, err := s.kv.Get(ctx, seededKey); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("reading %s: %w", seededKey, err)
	}
	var fixture []Entity
	if err := json.Unmarshal(fixtureJSON, &fixture); err != nil {
		return fmt.Errorf("decoding fixture: %w", err)
	}
	for _, e := range fixture {
		// Only if the key never held a value: an entity deleted since is
		// not brought back.
		if _, err := s.entities.CreateNew(ctx, entityKey(e.ID), &e); err != nil && !errors.Is(err, kvstate.ErrConflict) {
			return fmt.Errorf("seeding entity %s: %w", e.ID, err)
		}
	}
	marker, _ := json.Marshal(map[string]any{"at": s.now(), "entities": len(fixture)})
	if _, err := s.raw.Create(ctx, seededKey, marker, 0); err != nil && !errors.Is(err, kvstate.ErrConflict) {
		return fmt.Errorf("writing %s: %w", seededKey, err)
	}
	return nil
}

// Entity returns the live entity with the given ID. It returns ErrNotFound
// when the entity is absent, deleted, private (Entity.Owner) or id is not
// a valid entity ID, and a wrapped KV error otherwise.
func (s *Site) Entity(ctx context.Context, id string) (Entity, error) {
	e, _, err := s.get(ctx, id)
	return e, err
}

// get returns the public entity and its KV revision (a private one is
// ErrNotFound: the tools' view).
func (s *Site) get(ctx context.Context, id string) (Entity, uint64, error) {
	e, rev, err := s.getAny(ctx, id)
	if err == nil && e.Owner != "" {
		return Entity{}, 0, ErrNotFound
	}
	return e, rev, err
}

// getAny returns the entity, private or not, and its KV revision.
func (s *Site) getAny(ctx context.Context, id string) (Entity, uint64, error) {
	if !validID.MatchString(id) {
		return Entity{}, 0, ErrNotFound
	}
	e, rev, err := s.entities.Get(ctx, entityKey(id))
	if errors.Is(err, kvstate.ErrNotFound) {
		return Entity{}, 0, ErrNotFound
	}
	if err != nil {
		return Entity{}, 0, fmt.Errorf("reading entity %s: %w", id, err)
	}
	return *e, rev, nil
}

// Entities returns all live public entities (those without an Owner),
// sorted by ID (byte order, so "article-10" sorts before "article-2"). It
// returns a wrapped KV or decode error.
func (s *Site) Entities(ctx context.Context) ([]Entity, error) {
	all, err := s.allEntities(ctx)
	return slices.DeleteFunc(all, func(e Entity) bool { return e.Owner != "" }), err
}

// allEntities is Entities with the private entities.
func (s *Site) allEntities(ctx context.Context) ([]Entity, error) {
	var out []Entity
	err := scanJSON(ctx, s, entityPrefix+">", func(e Entity) { out = append(out, e) })
	if err != nil {
		return nil, fmt.Errorf("listing entities: %w", err)
	}
	slices.SortFunc(out, func(a, b Entity) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Ledger returns every recorded effect, one entry per effecting CallID,
// sorted by At then CallID. It returns a wrapped KV or decode error.
func (s *Site) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	var out []LedgerEntry
	err := scanJSON(ctx, s, ledgerPrefix+">", func(r ledgerRecord) {
		out = append(out, LedgerEntry{CallID: r.CallID, Tool: r.Tool, IDs: r.IDs, At: r.At})
	})
	if err != nil {
		return nil, fmt.Errorf("listing ledger: %w", err)
	}
	slices.SortFunc(out, func(a, b LedgerEntry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.CallID, b.CallID)
	})
	return out, nil
}

// scanJSON calls add with the latest value, decoded as a T, of every live
// key of s matching filter (see Site.scan). It returns the scan's error or
// the first value that does not decode, naming its key.
func scanJSON[T any](ctx context.Context, s *Site, filter string, add func(T)) error {
	return s.scan(ctx, filter, func(key string, v []byte) error {
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("decoding %s: %w", key, err)
		}
		add(x)
		return nil
	})
}

// scan calls fn with the latest value of every live key matching filter.
func (s *Site) scan(ctx context.Context, filter string, fn func(key string, value []byte) error) error {
	// Bounded like a request (a watch whose consumer is lost with a NATS
	// node never delivers its end), allowing for a large site.
	ctx, cancel := context.WithTimeout(ctx, 4*bus.RequestTimeout)
	defer cancel()
	w, err := s.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil { // all initial values delivered
				return nil
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}

package events

import (
	"mime"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// maxCachedAttrs bounds how many distinct attribute values (sources,
// data schemas, content types) the codec remembers as checked, per
// kind. parley's own events use a few dozen; integrators choose their
// sources, so past the bound a value is checked (and a URI parsed) on
// every event, as if nothing were remembered.
const maxCachedAttrs = 1024

// attrCache remembers attribute values that passed their check, with
// the parsed URI for the URI-valued ones: each distinct value is parsed
// and checked once, not on every event.
type attrCache struct {
	m sync.Map // string -> *url.URL (nil for values that are not URIs)
	n atomic.Int32
}

func (c *attrCache) get(v string) (*url.URL, bool) {
	u, ok := c.m.Load(v)
	if !ok {
		return nil, false
	}
	return u.(*url.URL), true
}

func (c *attrCache) put(v string, u *url.URL) {
	if c.n.Load() >= maxCachedAttrs {
		return
	}
	if _, loaded := c.m.LoadOrStore(v, u); !loaded {
		c.n.Add(1)
	}
}

var (
	sourceCache      attrCache // valid URI-references
	schemaCache      attrCache // valid absolute URIs
	contentTypeCache attrCache // JSON media types
)

// parseSource returns v parsed, when v is a URI-reference (RFC 3986).
func parseSource(v string) (*url.URL, bool) {
	if u, ok := sourceCache.get(v); ok {
		return u, true
	}
	if !validURIRef(v) {
		return nil, false
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, false
	}
	sourceCache.put(v, u)
	return u, true
}

// parseSchema returns v parsed, when v is an absolute URI (RFC 3986);
// ok is false otherwise, and relative says whether v was a
// URI-reference without a scheme.
func parseSchema(v string) (u *url.URL, ok, relative bool) {
	if u, ok := schemaCache.get(v); ok {
		return u, true, false
	}
	if !validURIRef(v) {
		return nil, false, false
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, false, false
	}
	if !u.IsAbs() {
		return nil, false, true
	}
	schemaCache.put(v, u)
	return u, true, false
}

// jsonContentType reports whether v is a media type (RFC 2045) of JSON:
// application/json or a "+json" type.
func jsonContentType(v string) (mediaType bool, isJSON bool) {
	if _, ok := contentTypeCache.get(v); ok {
		return true, true
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return false, false
	}
	if mt != DataContentTypeJSON && !strings.HasSuffix(mt, "+json") {
		return true, false
	}
	contentTypeCache.put(v, nil)
	return true, true
}

// setSource sets e's source; a value that is not a URI-reference is
// left to the SDK (which records the error Validate reports).
func setSource(e *event.Event, v string) {
	ec, ok := e.Context.(*event.EventContextV1)
	u, valid := parseSource(v)
	if !ok || !valid {
		e.SetSource(v)
		return
	}
	ec.Source = types.URIRef{URL: *u}
}

// setDataSchema sets e's dataschema, as setSource.
func setDataSchema(e *event.Event, v string) {
	ec, ok := e.Context.(*event.EventContextV1)
	u, valid, _ := parseSchema(v)
	if !ok || !valid {
		e.SetDataSchema(v)
		return
	}
	ec.DataSchema = &types.URI{URL: *u}
}

// valid reports whether e is a valid CloudEvent, as e.Validate() does,
// without its allocations for an event whose attributes are all in
// order (the common case); when it is not, or when in doubt, it returns
// e.Validate()'s error.
func valid(e *event.Event) error {
	ec, ok := e.Context.(*event.EventContextV1)
	if ok && len(e.FieldErrors) == 0 &&
		strings.TrimSpace(ec.ID) != "" && strings.TrimSpace(ec.Type) != "" &&
		strings.TrimSpace(ec.Source.Scheme+ec.Source.Host+ec.Source.Path+ec.Source.Opaque) != "" &&
		(ec.Subject == nil || strings.TrimSpace(*ec.Subject) != "") &&
		(ec.DataSchema == nil || ec.DataSchema.IsAbs()) {
		if ec.DataContentType == nil {
			return nil
		}
		if mt, _ := jsonContentType(*ec.DataContentType); mt {
			return nil
		}
	}
	if err := e.Validate(); err != nil {
		return err
	}
	return nil
}

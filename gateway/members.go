package gateway

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// exactMembers returns a violation for each member of the JSON body that
// names a field of t only when case is ignored ("Action" for "action").
// encoding/json matches member names case-insensitively, and
// DisallowUnknownFields does not refuse such a member: without this check
// {"action":"decline","Action":"accept"} would pass the duplicate-member
// check (two names) and be decoded as the last one, accept — read one way
// by a proxy or log and another by the gateway. The processor refuses
// such members on NATS (events.CheckInput compares names exactly), so both
// entrances give one answer. Objects decoded into maps, and values of
// types with their own JSON decoding, are open and not checked. Paths are
// dotted (content.title, share[0].principal), sorted.
func exactMembers(body []byte, t reflect.Type) []schema.Violation {
	var vs []schema.Violation
	walkMembers(json.RawMessage(body), t, "", &vs)
	slices.SortFunc(vs, func(a, b schema.Violation) int { return strings.Compare(a.Path, b.Path) })
	return vs
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func walkMembers(data json.RawMessage, t reflect.Type, path string, vs *[]schema.Violation) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return
		}
		for i, it := range items {
			walkMembers(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), vs)
		}
	case reflect.Struct:
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return
		}
		fields := jsonFields(t)
		for k, v := range m {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if f, ok := fields[k]; ok {
				walkMembers(v, f, p, vs)
				continue
			}
			for name := range fields {
				if strings.EqualFold(name, k) {
					*vs = append(*vs, schema.Violation{Path: p, Rule: events.RuleUnknownMember})
					break
				}
			}
		}
	}
}

// jsonFields maps the JSON member names of struct t (encoding/json's
// rules: the tag's name, else the field's name; "-" skipped; embedded
// untagged structs' fields promoted) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, typ := range jsonFields(ft) {
					if _, ok := out[n]; !ok {
						out[n] = typ
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

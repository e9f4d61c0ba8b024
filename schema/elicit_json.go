package schema

import (
	"encoding/json"
	"maps"
	"reflect"
)

// decodeMembers decodes the JSON object b member by member: a member with a
// destination in dst is decoded into it, and kept in extra when that fails
// (wrong JSON type); other members go to extra. A non-object b is an error.
func decodeMembers(b []byte, dst map[string]any) (extra map[string]json.RawMessage, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, &ValidationError{Violations: []Violation{{"", "must be a JSON object"}}}
	}
	for k, raw := range m {
		d, ok := dst[k]
		if ok {
			if rm, isRaw := d.(*json.RawMessage); isRaw {
				*rm = append(json.RawMessage(nil), raw...)
				continue
			}
			if json.Unmarshal(raw, d) == nil {
				continue
			}
			reflect.ValueOf(d).Elem().SetZero()
		}
		if extra == nil {
			extra = map[string]json.RawMessage{}
		}
		extra[k] = append(json.RawMessage(nil), raw...)
	}
	return extra, nil
}

// encodeWithExtra marshals v (a wire copy without methods) and adds the
// members of extra that v does not set; a member v sets only as its empty
// string (an undecodable "type") yields to extra.
func encodeWithExtra(v any, extra map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, raw := range extra {
		if cur, ok := m[k]; !ok || string(cur) == `""` {
			m[k] = raw
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON decodes the items schema; see ItemsSchema.Extra.
func (s *ItemsSchema) UnmarshalJSON(b []byte) error {
	var w ItemsSchema
	extra, err := decodeMembers(b, map[string]any{"type": &w.Type, "enum": &w.Enum, "anyOf": &w.AnyOf})
	if err != nil {
		return err
	}
	w.Extra = extra
	*s = w
	return nil
}

// MarshalJSON encodes the items schema with its Extra members.
func (s ItemsSchema) MarshalJSON() ([]byte, error) {
	type wire ItemsSchema
	return encodeWithExtra(wire(s), s.Extra)
}

// UnmarshalJSON decodes the property schema; it fails only when b is not a
// JSON object. See PropertySchema.Extra.
func (p *PropertySchema) UnmarshalJSON(b []byte) error {
	var w PropertySchema
	extra, err := decodeMembers(b, map[string]any{
		"type": &w.Type, "title": &w.Title, "description": &w.Description,
		"minLength": &w.MinLength, "maxLength": &w.MaxLength, "format": &w.Format,
		"minimum": &w.Minimum, "maximum": &w.Maximum, "default": &w.Default,
		"enum": &w.Enum, "enumNames": &w.EnumNames, "oneOf": &w.OneOf,
		"items": &w.Items, "minItems": &w.MinItems, "maxItems": &w.MaxItems,
	})
	if err != nil {
		return err
	}
	w.Extra = extra
	*p = w
	return nil
}

// MarshalJSON encodes the property schema with its Extra members.
func (p PropertySchema) MarshalJSON() ([]byte, error) {
	type wire PropertySchema
	return encodeWithExtra(wire(p), p.Extra)
}

// UnmarshalJSON decodes the requested schema. It fails only when b or one
// of its properties is not a JSON object (path "properties.<name>"); see
// RequestedSchema.Extra.
func (s *RequestedSchema) UnmarshalJSON(b []byte) error {
	var w RequestedSchema
	var props map[string]json.RawMessage
	extra, err := decodeMembers(b, map[string]any{"type": &w.Type, "properties": &props, "required": &w.Required})
	if err != nil {
		return err
	}
	if props != nil {
		w.Properties = make(map[string]*PropertySchema, len(props))
		for name, raw := range props {
			if isNull(raw) {
				w.Properties[name] = nil
				continue
			}
			ps := new(PropertySchema)
			if err := ps.UnmarshalJSON(raw); err != nil {
				var vs violations
				vs.merge("properties."+name, err)
				return vs.err()
			}
			w.Properties[name] = ps
		}
	}
	w.Extra = extra
	*s = w
	return nil
}

// MarshalJSON encodes the requested schema with its Extra members; nil
// Properties encode as {} (MCP requires the member).
func (s RequestedSchema) MarshalJSON() ([]byte, error) {
	type wire RequestedSchema
	w := wire(s)
	if w.Properties == nil {
		w.Properties = map[string]*PropertySchema{}
	}
	return encodeWithExtra(w, s.Extra)
}

// UnmarshalJSON decodes the params; an error names the field, e.g.
// "requestedSchema.properties.age: must be a JSON object".
func (p *ElicitRequestParams) UnmarshalJSON(b []byte) error {
	type wire ElicitRequestParams
	var w wire
	err := unmarshalAs(b, &w, "requestedSchema")
	*p = ElicitRequestParams(w)
	return err
}

// clone returns a deep copy of the property schema.
func (p *PropertySchema) clone() *PropertySchema {
	if p == nil {
		return nil
	}
	c := *p
	c.MinLength, c.MaxLength = cloneInt(p.MinLength), cloneInt(p.MaxLength)
	c.MinItems, c.MaxItems = cloneInt(p.MinItems), cloneInt(p.MaxItems)
	c.Minimum, c.Maximum = cloneFloat(p.Minimum), cloneFloat(p.Maximum)
	c.Default = append(json.RawMessage(nil), p.Default...)
	if p.Default == nil {
		c.Default = nil
	}
	c.Enum = cloneSlice(p.Enum)
	c.EnumNames = cloneSlice(p.EnumNames)
	c.OneOf = cloneSlice(p.OneOf)
	if p.Items != nil {
		it := *p.Items
		it.Enum, it.AnyOf, it.Extra = cloneSlice(it.Enum), cloneSlice(it.AnyOf), maps.Clone(it.Extra)
		c.Items = &it
	}
	c.Extra = maps.Clone(p.Extra)
	return &c
}

// Clone returns a deep copy of the requested schema, so a caller may keep
// changing its own.
func (s RequestedSchema) Clone() RequestedSchema {
	c := s
	c.Required = cloneSlice(s.Required)
	c.Extra = maps.Clone(s.Extra)
	if s.Properties != nil {
		c.Properties = make(map[string]*PropertySchema, len(s.Properties))
		for k, v := range s.Properties {
			c.Properties[k] = v.clone()
		}
	}
	return c
}

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneFloat(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T{}, s...)
}

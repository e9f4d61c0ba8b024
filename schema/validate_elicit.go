package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ElicitOptions are the optional settings of NewElicitRequest.
type ElicitOptions struct {
	// Revision is the MCP revision of the consumer the request is for; it
	// decides which shapes the form may use. Optional. Default:
	// DefaultRevision (2025-06-18, flat primitives only).
	Revision Revision
	// Widgets are rendering hints keyed by property name, stored at
	// _meta["drupal.org/ai.widgets"]; a hint for a property that does not
	// exist is an error. Optional. Default: none.
	Widgets map[string]Widget
	// Meta is the request's _meta (copied; keys and registered values are
	// validated). Optional. Default: none.
	Meta Meta
}

// NewElicitRequest builds the params of an `elicitation/create` request and
// validates them for opts.Revision (see ElicitRequestParams.Validate). The
// schema is copied, so the caller may reuse rs. The error is a
// *ValidationError naming every offending property and rule.
func NewElicitRequest(message string, rs RequestedSchema, opts *ElicitOptions) (*ElicitRequestParams, error) {
	if opts == nil {
		opts = &ElicitOptions{}
	}
	rev := opts.Revision
	if rev == "" {
		rev = DefaultRevision
	}
	p := &ElicitRequestParams{Message: message, RequestedSchema: rs.Clone(), Meta: opts.Meta.Clone()}
	if opts.Widgets != nil {
		p.Meta.SetWidgets(maps.Clone(opts.Widgets))
	}
	if err := p.Validate(rev); err != nil {
		return nil, err
	}
	return p, nil
}

// Property kinds, by the MCP schema they follow.
const (
	kindString  = "string"  // StringSchema
	kindEnum    = "enum"    // EnumSchema / UntitledSingleSelect / LegacyTitled
	kindTitled  = "titled"  // TitledSingleSelectEnumSchema (2025-11-25)
	kindNumber  = "number"  // NumberSchema (number or integer)
	kindBoolean = "boolean" // BooleanSchema
	kindArray   = "array"   // Untitled/TitledMultiSelectEnumSchema (2025-11-25)
)

// kind classifies the property, or returns "" when its type is not one MCP
// allows.
func (p *PropertySchema) kind() string {
	switch p.Type {
	case "string":
		switch {
		case p.Enum != nil:
			return kindEnum
		case p.OneOf != nil:
			return kindTitled
		}
		return kindString
	case "number", "integer":
		return kindNumber
	case "boolean":
		return kindBoolean
	case "array":
		return kindArray
	}
	return ""
}

var kindNames = map[string]string{
	kindString: "a string", kindEnum: "an enum", kindTitled: "a titled single-select",
	kindNumber: "a number", kindBoolean: "a boolean", kindArray: "a multi-select",
}

// keywords lists the keywords of each kind in revision 2025-06-18 and what
// 2025-11-25 adds.
var (
	keywords0618 = map[string][]string{
		kindString:  {"minLength", "maxLength", "format"},
		kindEnum:    {"enum", "enumNames"},
		kindNumber:  {"minimum", "maximum"},
		kindBoolean: {"default"},
	}
	keywords1125 = map[string][]string{
		kindString: {"default"},
		kindEnum:   {"default"},
		kindTitled: {"oneOf", "default"},
		kindNumber: {"default"},
		kindArray:  {"items", "minItems", "maxItems", "default"},
	}
	// keywordOrder is the order in which keyword violations are reported.
	keywordOrder = []string{
		"type", "title", "description", "minLength", "maxLength", "format",
		"minimum", "maximum", "enum", "enumNames", "oneOf", "items",
		"minItems", "maxItems", "default",
	}
)

func allowed(kind string, rev Revision, kw string) bool {
	switch kw {
	case "type", "title", "description":
		return true
	}
	if slices.Contains(keywords0618[kind], kw) {
		return true
	}
	return rev.extended() && slices.Contains(keywords1125[kind], kw)
}

// ForRevision returns the form as a client of revision rev can render it,
// after the one documented downgrade: a default on a property whose kind
// has none in rev (string, number and enum defaults, added by MCP
// 2025-11-25) is only a prefill hint, so it is dropped and the person
// types the value instead (docs/events.md, "Form revisions"). A boolean's
// default (allowed since 2025-06-18) is kept. Nothing else changes: every
// other shape rev lacks (titled or multi-select enums, "$schema", a mode)
// is left for Validate to refuse. s is not modified; the result shares
// only the properties it does not change. An unknown rev, or one with the
// 2025-11-25 shapes, returns s as it is.
func (s RequestedSchema) ForRevision(rev Revision) RequestedSchema {
	if rev == "" {
		rev = DefaultRevision
	}
	if !rev.Known() || rev.extended() {
		return s
	}
	var props map[string]*PropertySchema
	for name, ps := range s.Properties {
		if ps == nil || ps.Default == nil {
			continue
		}
		kind := ps.kind()
		if kind == "" || allowed(kind, rev, "default") {
			continue
		}
		if props == nil {
			props = maps.Clone(s.Properties)
		}
		c := *ps
		c.Default = nil
		props[name] = &c
	}
	if props != nil {
		s.Properties = props
	}
	return s
}

// ForRevision returns p with its form downgraded for revision rev (see
// RequestedSchema.ForRevision); p is not modified. A URL-mode request has
// no form and is returned as it is.
func (p ElicitRequestParams) ForRevision(rev Revision) ElicitRequestParams {
	if p.IsURLMode() {
		return p
	}
	p.RequestedSchema = p.RequestedSchema.ForRevision(rev)
	return p
}

// present reports whether the keyword kw is set on p.
func (p *PropertySchema) present(kw string) bool {
	switch kw {
	case "type":
		return p.Type != ""
	case "title":
		return p.Title != ""
	case "description":
		return p.Description != ""
	case "minLength":
		return p.MinLength != nil
	case "maxLength":
		return p.MaxLength != nil
	case "format":
		return p.Format != ""
	case "minimum":
		return p.Minimum != nil
	case "maximum":
		return p.Maximum != nil
	case "default":
		return p.Default != nil
	case "enum":
		return p.Enum != nil
	case "enumNames":
		return p.EnumNames != nil
	case "oneOf":
		return p.OneOf != nil
	case "items":
		return p.Items != nil
	case "minItems":
		return p.MinItems != nil
	case "maxItems":
		return p.MaxItems != nil
	}
	return false
}

// extraRule is the violation of an Extra member: a known keyword of the
// wrong JSON type, or a keyword MCP does not allow.
func extraRule(kw string, raw json.RawMessage, rev Revision) string {
	switch kw {
	case "type":
		if t := strings.TrimSpace(string(raw)); strings.HasPrefix(t, "[") {
			return "type lists are not allowed"
		}
		return "must be a string"
	case "title", "description", "format", "$schema":
		return "must be a string"
	case "minLength", "maxLength", "minItems", "maxItems":
		return "must be a non-negative integer"
	case "minimum", "maximum":
		return "must be a number"
	case "enum", "enumNames", "required":
		return "must be an array of strings"
	case "oneOf", "anyOf":
		if kw == "oneOf" {
			return "must be an array of {const, title} objects"
		}
	case "items":
		return "must be an object"
	}
	switch kw {
	case "$ref", "$dynamicRef", "$defs", "definitions", "$anchor", "$id":
		return "references are not allowed"
	case "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas":
		return "composition keywords are not allowed"
	case "properties", "additionalProperties", "patternProperties", "propertyNames", "dependentRequired":
		return "nested objects are not allowed"
	case "prefixItems", "contains", "additionalItems", "uniqueItems":
		return "arrays beyond multi-select enums are not allowed"
	}
	return fmt.Sprintf("keyword not defined by MCP %s", rev)
}

// Validate checks the request against the elicitation rules of revision rev
// ("" means DefaultRevision):
//
//   - message is required; mode is absent or, from 2025-11-25, "form";
//   - requestedSchema is {"type": "object", "properties", "required"?}
//     ("$schema" allowed from 2025-11-25), required naming declared
//     properties without repeats;
//   - every property is a flat primitive of MCP 2025-06-18: string (title,
//     description, minLength/maxLength ≥ 0 with min ≤ max, format email,
//     uri, date or date-time), number/integer (minimum ≤ maximum), boolean
//     (default), enum (type "string", a non-empty enum of distinct
//     strings, optional enumNames of the same length). Nested objects,
//     arrays, $ref/allOf/anyOf/not, type lists, null, other formats and
//     keywords the revision does not define are rejected;
//   - from 2025-11-25 (opt-in): titled single-select (oneOf of {const,
//     title}), multi-select arrays (items.enum or items.anyOf, minItems ≤
//     maxItems), and default on every primitive, of the right type and a
//     member of the options;
//   - _meta passes Meta.Validate, and every widget hint in
//     _meta["drupal.org/ai.widgets"] names a property;
//   - a tool confirmation (see IsToolConfirmation) asks only for the
//     optional string property "instructions", and is not marked as an
//     MCP server's question (MetaMCPServer).
//
// The error is a *ValidationError with one violation per rule broken, e.g.
// "requestedSchema.properties.age.minimum: must not be greater than
// maximum".
func (p *ElicitRequestParams) Validate(rev Revision) error {
	var vs violations
	if rev == "" {
		rev = DefaultRevision
	}
	if !rev.Known() {
		vs.addf("revision", "unsupported MCP revision %q (want %s, %s or %s)", rev, Rev20250618, Rev20251125, Rev20260728)
		return vs.err()
	}
	switch {
	case p.Mode == "":
	case (p.Mode == "form" || p.Mode == ModeURL) && rev.extended():
	case p.Mode == "form" || p.Mode == ModeURL:
		vs.addf("mode", "not defined by MCP %s (opt in to %s)", rev, Rev20251125)
	default:
		vs.addf("mode", `must be "form" or "url" (%q elicitation is not supported)`, p.Mode)
	}
	if p.Message == "" {
		vs.add("message", "required")
	}
	if p.Mode == ModeURL {
		p.validateURLMode(rev, &vs)
		return vs.err()
	}
	if p.URL != "" {
		vs.add("url", `only allowed with mode "url"`)
	}
	if p.ElicitationID != "" {
		vs.add("elicitationId", `only allowed with mode "url"`)
	}
	vs.merge("requestedSchema", p.RequestedSchema.validate(rev).err())
	vs.merge("", p.Meta.Validate())
	if ws, err := p.Meta.Widgets(); err == nil {
		for _, name := range slices.Sorted(maps.Keys(ws)) {
			if _, ok := p.RequestedSchema.Properties[name]; !ok {
				vs.add(metaPath(MetaWidgets)+"."+name, "no such property in requestedSchema")
			}
		}
	}
	if p.IsToolConfirmation() && !isConfirmationSchema(&p.RequestedSchema) {
		vs.add("requestedSchema", `a tool confirmation must ask only for the optional string property "instructions"`)
	}
	if _, ok := p.Meta[MetaMCPServer]; ok && p.IsToolConfirmation() {
		vs.add(metaPath(MetaToolCall), "an MCP server's question is never a tool confirmation (parley alone asks those)")
	}
	return vs.err()
}

// validateURLMode checks a URL-mode request (MCP 2025-11-25,
// ElicitRequestURLParams): url is an absolute http or https URL with a
// host and no user info, at most MaxElicitURLBytes; elicitationId is
// required (2025-11-25; optional from 2026-07-28); there is no
// requestedSchema, and it is not a tool confirmation.
func (p *ElicitRequestParams) validateURLMode(rev Revision, vs *violations) {
	switch u, err := url.Parse(p.URL); {
	case p.URL == "":
		vs.add("url", "required for a url-mode elicitation")
	case len(p.URL) > MaxElicitURLBytes:
		vs.addf("url", "longer than %d bytes", MaxElicitURLBytes)
	case err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		vs.add("url", "must be an absolute http or https URL with a host")
	case u.User != nil:
		vs.add("url", "must not carry user info (credentials) before the host")
	}
	if p.ElicitationID == "" && rev == Rev20251125 {
		vs.add("elicitationId", "required for a url-mode elicitation")
	}
	if !reflect.ValueOf(p.RequestedSchema).IsZero() {
		vs.add("requestedSchema", "not allowed for a url-mode elicitation")
	}
	vs.merge("", p.Meta.Validate())
	if p.IsToolConfirmation() {
		vs.add("mode", "a tool confirmation is a form, never a url-mode elicitation")
	}
}

func isConfirmationSchema(s *RequestedSchema) bool {
	ps, ok := s.Properties[InstructionsProperty]
	return ok && len(s.Properties) == 1 && len(s.Required) == 0 && ps != nil && ps.kind() == kindString
}

func (s *RequestedSchema) validate(rev Revision) violations {
	var vs violations
	if s.Type != "object" {
		if raw, ok := s.Extra["type"]; ok {
			vs.add("type", extraRule("type", raw, rev))
		} else {
			vs.add("type", `must be "object"`)
		}
	}
	if s.Properties == nil {
		if _, ok := s.Extra["properties"]; ok {
			vs.add("properties", "must be an object of property schemas")
		} else {
			vs.add("properties", "required")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		path := "properties." + name
		ps := s.Properties[name]
		switch {
		case name == "":
			vs.add(path, "property name must not be empty")
		case ps == nil:
			vs.add(path, "must be a schema object")
		default:
			vs.merge(path, ps.validate(rev).err())
		}
	}
	seen := map[string]bool{}
	for i, r := range s.Required {
		path := fmt.Sprintf("required[%d]", i)
		switch {
		case seen[r]:
			vs.addf(path, "duplicate %q", r)
		case s.Properties[r] == nil && !hasKey(s.Properties, r):
			vs.addf(path, "%q is not a property", r)
		}
		seen[r] = true
	}
	for _, k := range slices.Sorted(maps.Keys(s.Extra)) {
		switch k {
		case "type", "properties":
			// Reported above.
		case "$schema":
			var str string
			switch {
			case !rev.extended():
				vs.addf(k, "not defined by MCP %s (opt in to %s)", rev, Rev20251125)
			case json.Unmarshal(s.Extra[k], &str) != nil:
				vs.add(k, "must be a string")
			}
		default:
			vs.add(k, extraRule(k, s.Extra[k], rev))
		}
	}
	return vs
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func (p *PropertySchema) validate(rev Revision) violations {
	var vs violations
	for _, k := range slices.Sorted(maps.Keys(p.Extra)) {
		vs.add(k, extraRule(k, p.Extra[k], rev))
	}
	kind := p.kind()
	switch {
	case kind == kindArray && !rev.extended():
		vs.addf("type", `"array" is not allowed in MCP %s (multi-select needs %s)`, rev, Rev20251125)
		return vs
	case kind != "":
	case p.Type == "object":
		vs.add("type", "nested objects are not allowed")
		return vs
	case p.Type == "null":
		vs.add("type", `"null" is not allowed`)
		return vs
	case p.Type == "":
		if !hasKey(p.Extra, "type") {
			vs.add("type", "required")
		}
		return vs
	default:
		vs.addf("type", "%q is not allowed (string, number, integer, boolean)", p.Type)
		return vs
	}
	for _, kw := range keywordOrder {
		if !p.present(kw) || allowed(kind, rev, kw) {
			continue
		}
		switch {
		case allowed(kind, Rev20251125, kw):
			vs.addf(kw, "not defined by MCP %s (opt in to %s)", rev, Rev20251125)
		case kw == "enumNames" && p.Enum == nil:
			vs.add(kw, "requires enum")
		default:
			vs.addf(kw, "not allowed for %s property", kindNames[kind])
		}
	}
	nonNeg := func(kw string, v *int) {
		if v != nil && *v < 0 {
			vs.add(kw, "must be a non-negative integer")
		}
	}
	switch kind {
	case kindString:
		nonNeg("minLength", p.MinLength)
		nonNeg("maxLength", p.MaxLength)
		if p.MinLength != nil && p.MaxLength != nil && *p.MinLength > *p.MaxLength {
			vs.add("minLength", "must not be greater than maxLength")
		}
		switch p.Format {
		case "", FormatEmail, FormatURI, FormatDate, FormatDateTime:
		default:
			vs.addf("format", "%q is not allowed (email, uri, date, date-time)", p.Format)
		}
	case kindEnum:
		checkOptions(&vs, "enum", p.Enum)
		if p.EnumNames != nil && len(p.EnumNames) != len(p.Enum) {
			vs.addf("enumNames", "must have as many entries as enum (%d)", len(p.Enum))
		}
	case kindTitled:
		if p.Enum == nil {
			checkTitled(&vs, "oneOf", p.OneOf)
		}
	case kindNumber:
		for kw, v := range map[string]*float64{"minimum": p.Minimum, "maximum": p.Maximum} {
			if v != nil && !isFinite(*v) {
				vs.add(kw, "must be a finite number")
			}
		}
		if p.Minimum != nil && p.Maximum != nil && *p.Minimum > *p.Maximum {
			vs.add("minimum", "must not be greater than maximum")
		}
	case kindArray:
		nonNeg("minItems", p.MinItems)
		nonNeg("maxItems", p.MaxItems)
		if p.MinItems != nil && p.MaxItems != nil && *p.MinItems > *p.MaxItems {
			vs.add("minItems", "must not be greater than maxItems")
		}
		vs = append(vs, p.Items.validate(rev)...)
	}
	if p.Default != nil && allowed(kind, rev, "default") {
		var v any
		if err := json.Unmarshal(p.Default, &v); err != nil {
			vs.add("default", "must be valid JSON")
		} else {
			for _, r := range p.check(v) {
				vs.add("default", r)
			}
		}
	}
	slices.SortStableFunc(vs, func(a, b Violation) int {
		return keywordIndex(a.Path) - keywordIndex(b.Path)
	})
	return vs
}

func keywordIndex(path string) int {
	kw, _, _ := strings.Cut(path, ".")
	kw, _, _ = strings.Cut(kw, "[")
	if i := slices.Index(keywordOrder, kw); i >= 0 {
		return i
	}
	return -1
}

func checkOptions(vs *violations, path string, opts []string) {
	if len(opts) == 0 {
		vs.add(path, "must not be empty")
	}
	seen := map[string]bool{}
	for _, o := range opts {
		if seen[o] {
			vs.addf(path, "duplicate value %q", o)
		}
		seen[o] = true
	}
}

func checkTitled(vs *violations, path string, opts []EnumOption) {
	if len(opts) == 0 {
		vs.add(path, "must not be empty")
	}
	seen := map[string]bool{}
	for i, o := range opts {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case o.Const == "":
			vs.add(p+".const", "required")
		case seen[o.Const]:
			vs.addf(p+".const", "duplicate value %q", o.Const)
		}
		seen[o.Const] = true
		if o.Title == "" {
			vs.add(p+".title", "required")
		}
	}
}

func (it *ItemsSchema) validate(rev Revision) violations {
	var vs violations
	if it == nil {
		vs.add("items", "required")
		return vs
	}
	for _, k := range slices.Sorted(maps.Keys(it.Extra)) {
		rule := extraRule(k, it.Extra[k], rev)
		if k == "anyOf" {
			rule = "must be an array of {const, title} objects"
		}
		vs.add("items."+k, rule)
	}
	switch {
	case it.Enum != nil && it.AnyOf != nil:
		vs.add("items", "must have enum or anyOf, not both")
	case it.Enum != nil:
		if it.Type != "string" {
			vs.add("items.type", `must be "string"`)
		}
		checkOptions(&vs, "items.enum", it.Enum)
	case it.AnyOf != nil:
		if it.Type != "" && it.Type != "string" {
			vs.add("items.type", `must be "string"`)
		}
		checkTitled(&vs, "items.anyOf", it.AnyOf)
	default:
		if !hasKey(it.Extra, "enum") && !hasKey(it.Extra, "anyOf") {
			vs.add("items", "must have enum or anyOf")
		}
	}
	return vs
}

// options returns the values a single- or multi-select property allows
// (nil for free-form properties).
func (p *PropertySchema) options() []string {
	switch {
	case p.Enum != nil:
		return p.Enum
	case p.OneOf != nil:
		return consts(p.OneOf)
	case p.Items != nil && p.Items.Enum != nil:
		return p.Items.Enum
	case p.Items != nil:
		return consts(p.Items.AnyOf)
	}
	return nil
}

func consts(opts []EnumOption) []string {
	out := make([]string, len(opts))
	for i, o := range opts {
		out[i] = o.Const
	}
	return out
}

// check returns the rules the value v (a decoded JSON value or a Go string,
// number, bool or []string) breaks for this property.
func (p *PropertySchema) check(v any) []string {
	var rules []string
	switch kind := p.kind(); kind {
	case kindString, kindEnum, kindTitled:
		s, ok := v.(string)
		if !ok {
			return []string{"must be a string"}
		}
		n := utf8.RuneCountInString(s)
		if p.MinLength != nil && n < *p.MinLength {
			rules = append(rules, fmt.Sprintf("must be at least %d characters", *p.MinLength))
		}
		if p.MaxLength != nil && n > *p.MaxLength {
			rules = append(rules, fmt.Sprintf("must be at most %d characters", *p.MaxLength))
		}
		if p.Format != "" && !CheckFormat(p.Format, s) {
			rules = append(rules, formatRule(p.Format))
		}
		if kind != kindString && !slices.Contains(p.options(), s) {
			rules = append(rules, "must be one of the enum values")
		}
	case kindNumber:
		f, ok := toFloat(v)
		switch {
		case !ok && p.Type == "integer":
			return []string{"must be an integer"}
		case !ok:
			return []string{"must be a number"}
		case !isFinite(f):
			return []string{"must be a finite number"}
		case p.Type == "integer" && f != math.Trunc(f):
			return []string{"must be an integer"}
		}
		if p.Minimum != nil && f < *p.Minimum {
			rules = append(rules, "must be at least "+formatNumber(*p.Minimum))
		}
		if p.Maximum != nil && f > *p.Maximum {
			rules = append(rules, "must be at most "+formatNumber(*p.Maximum))
		}
	case kindBoolean:
		if _, ok := v.(bool); !ok {
			return []string{"must be a boolean"}
		}
	case kindArray:
		items, ok := toStrings(v)
		if !ok {
			return []string{"must be an array of strings"}
		}
		if p.MinItems != nil && len(items) < *p.MinItems {
			rules = append(rules, fmt.Sprintf("must have at least %d items", *p.MinItems))
		}
		if p.MaxItems != nil && len(items) > *p.MaxItems {
			rules = append(rules, fmt.Sprintf("must have at most %d items", *p.MaxItems))
		}
		opts := p.options()
		seen := map[string]bool{}
		for _, it := range items {
			if seen[it] {
				rules = append(rules, fmt.Sprintf("duplicate item %q", it))
			} else if !slices.Contains(opts, it) {
				rules = append(rules, fmt.Sprintf("item %q is not one of the options", it))
			}
			seen[it] = true
		}
	}
	return rules
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// toFloat converts a JSON number (or a Go number) to float64.
func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func toStrings(v any) ([]string, bool) {
	switch x := v.(type) {
	case []string:
		return x, true
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

// Validate checks the result against the request it answers (a nil req is
// an empty form that is not a tool confirmation):
//
//   - action is exactly "accept", "decline" or "cancel";
//   - content comes only with accept, and, for a tool confirmation (a
//     request carrying _meta["drupal.org/ai.tool_call"]), also with decline,
//     where it may hold only "instructions" (a string); content with a
//     form's decline or with any cancel is rejected ("content: only allowed
//     with accept");
//   - on accept, every required property is present ("required"), no
//     undeclared property is ("not a property of the requested schema"),
//     and each value has its property's type (an integer is a whole number;
//     no strings for numbers or booleans), range, length (in Unicode code
//     points), enum membership, item count, and format, checked for real
//     (email, absolute uri, RFC 3339 date and date-time);
//   - _meta passes Meta.Validate.
//
// The error is a *ValidationError with one "property: rule" per violation,
// in the order of req.RequestedSchema.PropertyNames, then undeclared
// properties sorted.
func (r *ElicitResult) Validate(req *ElicitRequestParams) error {
	var vs violations
	if req == nil {
		req = &ElicitRequestParams{}
	}
	rs := &req.RequestedSchema
	switch r.Action {
	case ActionAccept, ActionDecline, ActionCancel:
		if req.IsURLMode() && r.Content != nil {
			// MCP 2025-11-25: "The content field is omitted" for URL mode;
			// accept is consent to visit the URL, nothing more.
			vs.add("content", "not allowed for a url-mode elicitation (the answer is only the action)")
			vs.merge("", r.Meta.Validate())
			return vs.err()
		}
	}
	switch r.Action {
	case ActionAccept:
		for _, name := range rs.PropertyNames() {
			v, ok := r.Content[name]
			if !ok {
				if slices.Contains(rs.Required, name) {
					vs.add(name, "required")
				}
				continue
			}
			if ps := rs.Properties[name]; ps != nil {
				for _, rule := range ps.check(v) {
					vs.add(name, rule)
				}
			}
		}
		for _, name := range slices.Sorted(maps.Keys(r.Content)) {
			if !hasKey(rs.Properties, name) {
				vs.add(name, "not a property of the requested schema")
			}
		}
	case ActionDecline:
		if r.Content == nil {
			break
		}
		if !req.IsToolConfirmation() {
			vs.add("content", "only allowed with accept")
			break
		}
		for _, name := range slices.Sorted(maps.Keys(r.Content)) {
			if name != InstructionsProperty {
				vs.add(name, `only "instructions" is allowed with decline`)
				continue
			}
			ps := rs.Properties[InstructionsProperty]
			if ps == nil {
				ps = &PropertySchema{Type: "string"}
			}
			for _, rule := range ps.check(r.Content[name]) {
				vs.add(name, rule)
			}
		}
	case ActionCancel:
		if r.Content != nil {
			vs.add("content", "only allowed with accept")
		}
	default:
		vs.add("action", `must be "accept", "decline" or "cancel"`)
	}
	vs.merge("", r.Meta.Validate())
	return vs.err()
}

// Instructions returns the user's instructions on a tool confirmation's
// answer: content["instructions"] when it is a string, else "".
func (r *ElicitResult) Instructions() string {
	s, _ := r.Content[InstructionsProperty].(string)
	return s
}

// UnmarshalJSON decodes a result; a member of the wrong JSON type is a
// *ValidationError naming it ("action: must be a string").
func (r *ElicitResult) UnmarshalJSON(b []byte) error {
	type wire ElicitResult
	var w wire
	err := unmarshalAs(b, &w)
	*r = ElicitResult(w)
	return err
}

package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// optionalToolMembers are the members of a Tool that only describe or hint:
// a reader that cannot decode one may treat it as absent. Without
// annotations a tool takes MCP's defaults (not read-only, destructive), so
// dropping them can only make gating stricter.
var optionalToolMembers = []string{"annotations", "_meta", "title", "description"}

// DecodeToolTolerant decodes a stored tool definition, treating an
// unreadable optional member (annotations, _meta, title, description) as
// absent rather than failing the whole definition. ignored lists each
// member so treated with its rule (e.g. "annotations.readOnlyHint: must be
// a boolean"), for the caller to log. err is a *ValidationError when the
// definition is unreadable even so (not a JSON object; name or inputSchema
// of the wrong type).
//
// Use it where one bad definition must not stop the others (the tool
// registry, a policy service); use ValidateTool where a definition is
// accepted (registration), so bad ones are refused there with the rule.
func DecodeToolTolerant(b []byte) (t Tool, ignored []Violation, err error) {
	if err = json.Unmarshal(b, &t); err == nil {
		return t, nil, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		var vs violations
		vs.add("", "must be a JSON object")
		return Tool{}, nil, vs.err()
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(optionalToolMembers, k) {
			continue
		}
		var probe Tool
		if perr := json.Unmarshal(mustObject(k, m[k]), &probe); perr != nil {
			for _, v := range Violations(perr) {
				if v.Path == "" {
					v.Path = k
				}
				ignored = append(ignored, v)
			}
			delete(m, k)
		}
	}
	clean, merr := json.Marshal(m)
	if merr != nil {
		return Tool{}, ignored, fmt.Errorf("re-encoding tool definition: %w", merr)
	}
	t = Tool{}
	if err = json.Unmarshal(clean, &t); err != nil {
		return Tool{}, ignored, err
	}
	return t, ignored, nil
}

package schema

import (
	"embed"
	"io/fs"
)

//go:embed dev.parley.*.json
var eventSchemaFiles embed.FS

// EventSchemas returns the JSON Schemas (draft-07) of the data of parley's
// CloudEvents, one file per event type named "<type>.json": the files the
// events' dataschema URIs (https://parley.dev/schema/<type>.json) name. They
// are generated from events.Catalog (go test ./events -run TestJSONSchemas
// -update); the gateway serves them under /schema/.
func EventSchemas() fs.FS { return eventSchemaFiles }

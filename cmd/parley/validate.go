package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parley-dev/parley/schema"
)

// validateCmd is `parley validate <kind>`: it checks MCP shapes with the
// rules parley applies (package schema), printing one "path: rule" line
// per violation on stdout.
type validateCmd struct {
	ElicitationRequest validateRequestCmd `cmd:"" name:"elicitation-request" help:"The params object of elicitation/create (message, requestedSchema, _meta)."`
	ElicitationResult  validateResultCmd  `cmd:"" name:"elicitation-result" help:"An ElicitResult, against the request it answers."`
	MetaKey            validateMetaKeyCmd `cmd:"" name:"meta-key" help:"_meta keys (MCP key grammar, reserved prefixes, drupal.org registry)."`
	Content            validateContentCmd `cmd:"" name:"content" help:"One content block or an array of them."`
	Tool               validateToolCmd    `cmd:"" name:"tool" help:"A tool definition."`
}

// Help is the long help of validate (kong's HelpProvider).
func (v *validateCmd) Help() string { return validateExitHelp }

// exitHelp gives each validate command the exit statuses in its help.
type exitHelp struct{}

// Help is kong's HelpProvider.
func (exitHelp) Help() string { return validateExitHelp }

const validateExitHelp = `<file> defaults to standard input ("-").

Exit status: 0 valid; 1 invalid, with one "path: rule" line per violation on
standard output; 2 usage error or unreadable input.`

// Exit statuses of validate.
const (
	exitInvalid = 1
	exitUsage   = 2
)

// revisionFlag is --revision, the MCP revision of the consumer.
type revisionFlag struct {
	Revision string `name:"revision" default:"2025-06-18" help:"MCP revision of the consumer: 2025-06-18, 2025-11-25 or 2026-07-28."`
}

// Validate checks --revision (kong calls it after parsing).
func (f *revisionFlag) Validate() error {
	if !schema.Revision(f.Revision).Known() {
		return fmt.Errorf("--revision: unsupported revision %q (want %s, %s or %s)", f.Revision, schema.Rev20250618, schema.Rev20251125, schema.Rev20260728)
	}
	return nil
}

// fileArg is the FILE argument ("-": standard input).
type fileArg struct {
	File string `arg:"" optional:"" default:"-" help:"The JSON file; - (the default) reads standard input."`
}

type validateRequestCmd struct {
	exitHelp
	revisionFlag
	fileArg
}

func (c *validateRequestCmd) Run(e *env) error {
	data, err := readInput(c.File, e.stdin)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	var p schema.ElicitRequestParams
	if vs := decode(data, &p); vs != nil {
		return report(e.stdout, vs)
	}
	return report(e.stdout, schema.Violations(p.Validate(schema.Revision(c.Revision))))
}

type validateResultCmd struct {
	exitHelp
	Request string `name:"request" required:"" placeholder:"FILE" help:"The elicitation request (params of elicitation/create) the result answers."`
	revisionFlag
	fileArg
}

func (c *validateResultCmd) Run(e *env) error {
	data, err := readInput(c.File, e.stdin)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	reqData, err := readInput(c.Request, nil)
	if err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("--request: %w", err)}
	}
	var req schema.ElicitRequestParams
	if vs := decode(reqData, &req); vs != nil {
		return report(e.stdout, prefix("request", vs))
	}
	if err := req.Validate(schema.Revision(c.Revision)); err != nil {
		return report(e.stdout, prefix("request", schema.Violations(err)))
	}
	var res schema.ElicitResult
	if vs := decode(data, &res); vs != nil {
		return report(e.stdout, vs)
	}
	return report(e.stdout, schema.Violations(res.Validate(&req)))
}

type validateMetaKeyCmd struct {
	exitHelp
	Keys []string `arg:"" name:"key" help:"The keys."`
}

func (c *validateMetaKeyCmd) Run(e *env) error {
	var vs []schema.Violation
	for _, k := range c.Keys {
		vs = append(vs, schema.Violations(schema.ValidateMetaKey(k))...)
	}
	return report(e.stdout, vs)
}

type validateContentCmd struct {
	exitHelp
	fileArg
}

func (c *validateContentCmd) Run(e *env) error {
	data, err := readInput(c.File, e.stdin)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		var l schema.ContentList
		return report(e.stdout, decode(data, &l))
	}
	if !json.Valid(data) {
		return report(e.stdout, decode(data, new(any)))
	}
	_, err = schema.UnmarshalContent(data)
	return report(e.stdout, schema.Violations(err))
}

type validateToolCmd struct {
	exitHelp
	fileArg
}

func (c *validateToolCmd) Run(e *env) error {
	data, err := readInput(c.File, e.stdin)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	var t schema.Tool
	if vs := decode(data, &t); vs != nil {
		return report(e.stdout, vs)
	}
	return report(e.stdout, schema.Violations(schema.ValidateTool(&t)))
}

// readInput reads the named file, or stdin for "-".
func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		if stdin == nil {
			return nil, fmt.Errorf("cannot read standard input here")
		}
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading input: %w", err)
	}
	return data, nil
}

// decode unmarshals data into v and returns the violations of a failure
// (nil on success): invalid JSON, or a field of the wrong shape.
func decode(data []byte, v any) []schema.Violation {
	if !json.Valid(data) {
		var se *json.SyntaxError
		err := json.Unmarshal(data, new(any))
		if errors.As(err, &se) {
			return []schema.Violation{{Path: "input", Rule: fmt.Sprintf("not valid JSON (offset %d: %v)", se.Offset, se)}}
		}
		return []schema.Violation{{Path: "input", Rule: "not valid JSON"}}
	}
	vs := schema.Violations(json.Unmarshal(data, v))
	for i := range vs {
		if vs[i].Path == "" {
			vs[i].Path = "input"
		}
	}
	return vs
}

func prefix(p string, vs []schema.Violation) []schema.Violation {
	out := make([]schema.Violation, len(vs))
	for i, v := range vs {
		out[i] = schema.Violation{Path: p, Rule: v.Rule}
		if v.Path != "" {
			out[i].Path = p + "." + v.Path
		}
	}
	return out
}

// report prints the violations and returns the exit status as an error
// (nil when valid).
func report(w io.Writer, vs []schema.Violation) error {
	if len(vs) == 0 {
		return nil
	}
	for _, v := range vs {
		fmt.Fprintln(w, v.String())
	}
	return &exitError{code: exitInvalid}
}

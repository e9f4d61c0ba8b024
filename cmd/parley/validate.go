package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/parley-dev/parley/schema"
)

const validateUsage = `usage: parley validate <kind> [flags] [FILE|-]

Checks MCP shapes with the rules parley applies (package schema).

  parley validate elicitation-request [--revision R] [FILE|-]
      the params object of elicitation/create (message, requestedSchema, _meta)
  parley validate elicitation-result --request FILE [--revision R] [FILE|-]
      an ElicitResult, against the request it answers
  parley validate meta-key KEY...
      _meta keys (MCP key grammar, reserved prefixes, drupal.org registry)
  parley validate content [FILE|-]
      one content block or an array of them
  parley validate tool [FILE|-]
      a tool definition

FILE defaults to standard input ("-"). --revision is 2025-06-18 (default),
2025-11-25 or 2026-07-28.

Exit status: 0 valid; 1 invalid, with one "path: rule" line per violation on
standard output; 2 usage error or unreadable input.
`

// Exit statuses of runValidate.
const (
	exitValid   = 0
	exitInvalid = 1
	exitUsage   = 2
)

// runValidate runs `parley validate`; args are the words after "validate".
// It prints one "path: rule" line per violation on stdout and returns the
// exit status: 0 valid, 1 invalid, 2 usage error or unreadable input.
func runValidate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, validateUsage)
		return exitUsage
	}
	kind, args := args[0], args[1:]
	fs := flag.NewFlagSet("validate "+kind, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, validateUsage) }
	var rev, request string
	switch kind {
	case "elicitation-request":
		fs.StringVar(&rev, "revision", string(schema.DefaultRevision), "MCP revision of the consumer")
	case "elicitation-result":
		fs.StringVar(&rev, "revision", string(schema.DefaultRevision), "MCP revision of the consumer")
		fs.StringVar(&request, "request", "", "the elicitation request `FILE` the result answers (required)")
	case "meta-key", "content", "tool":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, validateUsage)
		return exitValid
	default:
		fmt.Fprintf(stderr, "parley validate: unknown kind %q\n\n%s", kind, validateUsage)
		return exitUsage
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitValid
	}
	if err != nil {
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "parley validate %s: %s\n", kind, fmt.Sprintf(format, a...))
		return exitUsage
	}
	r := schema.Revision(rev)
	if rev != "" && !r.Known() {
		return usageErr("unsupported revision %q (want %s, %s or %s)", rev, schema.Rev20250618, schema.Rev20251125, schema.Rev20260728)
	}

	if kind == "meta-key" {
		if len(pos) == 0 {
			return usageErr("no KEY given")
		}
		var vs []schema.Violation
		for _, k := range pos {
			vs = append(vs, schema.Violations(schema.ValidateMetaKey(k))...)
		}
		return report(stdout, vs)
	}

	if len(pos) > 1 {
		return usageErr("more than one FILE given")
	}
	name := "-"
	if len(pos) == 1 {
		name = pos[0]
	}
	data, err := readInput(name, stdin)
	if err != nil {
		return usageErr("%v", err)
	}

	switch kind {
	case "elicitation-request":
		var p schema.ElicitRequestParams
		if vs := decode(data, &p); vs != nil {
			return report(stdout, vs)
		}
		return report(stdout, schema.Violations(p.Validate(r)))

	case "elicitation-result":
		if request == "" {
			return usageErr("--request FILE is required")
		}
		reqData, err := readInput(request, nil)
		if err != nil {
			return usageErr("%v", err)
		}
		var req schema.ElicitRequestParams
		if vs := decode(reqData, &req); vs != nil {
			return report(stdout, prefix("request", vs))
		}
		if err := req.Validate(r); err != nil {
			return report(stdout, prefix("request", schema.Violations(err)))
		}
		var res schema.ElicitResult
		if vs := decode(data, &res); vs != nil {
			return report(stdout, vs)
		}
		return report(stdout, schema.Violations(res.Validate(&req)))

	case "content":
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
			var l schema.ContentList
			return report(stdout, decode(data, &l))
		}
		if !json.Valid(data) {
			return report(stdout, decode(data, new(any)))
		}
		_, err := schema.UnmarshalContent(data)
		return report(stdout, schema.Violations(err))

	case "tool":
		var t schema.Tool
		if vs := decode(data, &t); vs != nil {
			return report(stdout, vs)
		}
		return report(stdout, schema.Violations(schema.ValidateTool(&t)))
	}
	return exitUsage
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// A "--" ends the flags: everything after it is positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
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

// report prints the violations and returns the exit status.
func report(w io.Writer, vs []schema.Violation) int {
	if len(vs) == 0 {
		return exitValid
	}
	for _, v := range vs {
		fmt.Fprintln(w, v.String())
	}
	return exitInvalid
}

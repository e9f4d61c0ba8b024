// Command mcpcounter is the stdio MCP server of the chaos test's MCP
// scenario (chaos/mcp_test.go): its tools write one line per execution to
// a ledger file (an effect the test can count), then take a while, so the
// test can kill the tool-executor in the middle of a call.
//
//	mcpcounter <ledger file> <call duration>
//
// Ledger line: "<tool> <key> <parent pid>" (the parent is the
// tool-executor process that started this server).
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type args struct {
	Key string `json:"key" jsonschema:"what to count"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: mcpcounter <ledger file> <call duration>")
		os.Exit(2)
	}
	ledger := os.Args[1]
	d, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpcounter:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	count := func(tool string) mcp.ToolHandlerFor[args, any] {
		return func(ctx context.Context, _ *mcp.CallToolRequest, in args) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			f, err := os.OpenFile(ledger, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err == nil {
				_, err = fmt.Fprintf(f, "%s %s %d\n", tool, in.Key, os.Getppid())
				if err == nil {
					err = f.Sync()
				}
				f.Close()
			}
			mu.Unlock()
			if err != nil {
				return nil, nil, err
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "counted " + in.Key}}}, nil, nil
		}
	}
	f := false
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpcounter", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "count", Description: "Counts a key once (not idempotent).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &f}}, count("count"))
	mcp.AddTool(srv, &mcp.Tool{Name: "recount", Description: "Counts a key (idempotent: safe to run again).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &f, IdempotentHint: true}}, count("recount"))
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpcounter:", err)
		os.Exit(1)
	}
}

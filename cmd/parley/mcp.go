package main

import (
	"context"
	"log/slog"

	"github.com/parley-dev/parley/workers/toolexec"
	"github.com/parley-dev/parley/workers/toolexec/mcpclient"
)

// mcpFlags configure the MCP servers whose tools the tool-executor runs.
type mcpFlags struct {
	MCPConfig string `name:"mcp-config" env:"PARLEY_MCP_CONFIG" type:"existingfile" help:"MCP servers file (JSON, see docs/MCP.md); their tools are registered as <server>__<tool>."`
}

// check loads the file, so a bad one is a usage error before connecting.
func (m mcpFlags) check() error {
	if m.MCPConfig == "" {
		return nil
	}
	_, err := mcpclient.LoadConfig(m.MCPConfig)
	return err
}

// startMCP connects to the configured MCP servers (none without
// --mcp-config); stop disconnects them. Progress of their calls is
// published on the thread's progress subject (toolexec.ReportProgress).
func startMCP(ctx context.Context, m mcpFlags, log *slog.Logger) (sources []toolexec.Source, stop func(), err error) {
	if m.MCPConfig == "" {
		return nil, func() {}, nil
	}
	cfg, err := mcpclient.LoadConfig(m.MCPConfig)
	if err != nil {
		return nil, nil, err
	}
	servers, err := mcpclient.StartAll(ctx, cfg, mcpclient.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	for _, s := range servers {
		sources = append(sources, s)
	}
	return sources, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}, nil
}

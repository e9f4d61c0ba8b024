package schema

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
)

// A tool's input schema is compiled once and then shared by concurrent
// validations, which still tell valid arguments from invalid ones; past
// maxCompiledSchemas distinct schemas, validation still works (it
// compiles each time).
func TestCompiledInputSchemaShared(t *testing.T) {
	tool := Tool{Name: "shared", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":5}},"required":["n"],"x-shared":1}`)}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 20 {
				n := (i + j) % 8
				err := tool.ValidateArguments(json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
				if (err == nil) != (n <= 5) {
					t.Errorf("n=%d: %v", n, err)
				}
			}
		})
	}
	wg.Wait()
	if _, ok := compiledSchemas.Load(string(tool.InputSchema)); !ok {
		t.Error("the schema was not kept compiled")
	}
	for i := range maxCompiledSchemas + 10 {
		tl := Tool{Name: "many", InputSchema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"k%d":{"type":"string"}},"required":["k%d"]}`, i, i))}
		if err := tl.ValidateArguments(json.RawMessage(`{}`)); err == nil {
			t.Fatalf("schema %d: a missing required member passed", i)
		}
	}
	if n := compiledSchemasLen.Load(); n > maxCompiledSchemas {
		t.Errorf("%d compiled schemas kept, want at most %d", n, maxCompiledSchemas)
	}
}

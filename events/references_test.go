package events

import (
	"strings"
	"testing"

	"github.com/parley-dev/parley/schema"
)

func TestMessageReferences(t *testing.T) {
	ref := func(id string) schema.Content { return ReferenceLink(schema.Entity{EntityType: "page", ID: id}, "") }
	m := schema.ChatMessage{Role: schema.RoleUser, Text: "compare these", Content: schema.ContentList{
		schema.Text("not a reference"), ref("page-1"),
		&schema.ResourceLink{URI: "https://x.test/a", Name: "a plain link"},
		&schema.EmbeddedResource{Resource: schema.ResourceContents{URI: "entity:page/page-2", Text: new("quoted")},
			Meta: schema.Meta{schema.MetaEntity: schema.Entity{EntityType: "page", ID: "page-2"}}},
	}}
	refs, vs := MessageReferences("data.message.", m)
	if len(vs) != 0 || len(refs) != 2 || refs[0].Block != 1 || refs[0].Entity.ID != "page-1" || refs[1].Block != 3 || refs[1].Entity.ID != "page-2" {
		t.Fatalf("refs %+v, violations %v; want blocks 1 and 3", refs, vs)
	}

	many := schema.ChatMessage{Role: schema.RoleUser, Text: "x"}
	for i := range MaxReferences + 1 {
		many.Content = append(many.Content, ref("p"+string(rune('a'+i))))
	}
	if _, vs := MessageReferences("data.message.", many); len(vs) != 1 || vs[0].Path != "data.message.content" ||
		!strings.Contains(vs[0].Rule, "at most 8 context references") {
		t.Errorf("too many references: %v", vs)
	}

	big := schema.ChatMessage{Role: schema.RoleUser, Text: "x", Content: schema.ContentList{
		ref("page-1"), ReferenceLink(schema.Entity{EntityType: "page", ID: strings.Repeat("x", MaxReferenceBlockBytes)}, "")}}
	if _, vs := MessageReferences("", big); len(vs) != 1 || vs[0].Path != "content[1]" || !strings.Contains(vs[0].Rule, "over the limit of 4096") {
		t.Errorf("oversize reference: %v", vs)
	}

	forged := schema.ChatMessage{Role: schema.RoleUser, Text: "x", Meta: schema.Meta{schema.MetaReferences: []any{}}}
	if _, vs := MessageReferences("data.message.", forged); len(vs) != 1 || vs[0].Path != `data.message._meta["dev.parley/references"]` {
		t.Errorf("a message carrying parley's resolved references: %v", vs)
	}
}

func TestParseReference(t *testing.T) {
	e, err := ParseReference("page:page-1")
	if err != nil || e.EntityType != "page" || e.ID != "page-1" {
		t.Fatalf("page:page-1 = %+v, %v", e, err)
	}
	if l := ReferenceLink(e, ""); l.URI != "entity:page/page-1" || l.Name != "page:page-1" || schema.ValidateContent(l) != nil {
		t.Errorf("link %+v: %v", l, schema.ValidateContent(l))
	}
	for _, bad := range []string{"", "page", "page:", ":1", "Page:1", "pa ge:1"} {
		if _, err := ParseReference(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

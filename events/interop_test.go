package events

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/google/go-cmp/cmp"
)

// sdkNATSMessage reads a NATS message the way sdk-go's
// protocol/nats_jetstream/v2 Message does (binary iff a "ce-specversion"
// header is present, case-sensitive lookup; every "ce-" header is an
// attribute or extension; values are taken verbatim). It lets the test run
// sdk-go's binding.ToEvent over our headers without the protocol module.
type sdkNATSMessage struct {
	h    Header
	body []byte
}

var sdkSpecs = spec.WithPrefix("ce-")

func (m *sdkNATSMessage) version() spec.Version {
	vs := m.h[sdkSpecs.PrefixedSpecVersionName()]
	if len(vs) == 0 {
		return nil
	}
	return sdkSpecs.Version(vs[0])
}

func (m *sdkNATSMessage) ReadEncoding() binding.Encoding {
	if m.version() != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *sdkNATSMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *sdkNATSMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	v := m.version()
	if v == nil {
		return binding.ErrNotBinary
	}
	for name, vs := range m.h {
		if !strings.HasPrefix(name, sdkSpecs.Prefix()) {
			continue
		}
		var err error
		if attr := v.Attribute(name); attr != nil {
			err = w.SetAttribute(attr, vs[0])
		} else {
			err = w.SetExtension(strings.TrimPrefix(name, sdkSpecs.Prefix()), vs[0])
		}
		if err != nil {
			return err
		}
	}
	if m.body != nil {
		return w.SetData(bytes.NewReader(m.body))
	}
	return nil
}

func (m *sdkNATSMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if vs := m.h[attr.PrefixedName()]; len(vs) > 0 {
		return attr, vs[0]
	}
	return attr, nil
}

func (m *sdkNATSMessage) GetExtension(name string) any {
	if vs := m.h[sdkSpecs.Prefix()+name]; len(vs) > 0 {
		return vs[0]
	}
	return nil
}

func (m *sdkNATSMessage) Finish(error) error { return nil }

func TestEncodeHeaderNamesAreLowercaseCE(t *testing.T) {
	e := fullEvent(t)
	e.SetExtension("RunID", "run-1") // sdk-go lowercases extension names
	h, _, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	for name := range h {
		if !strings.HasPrefix(name, "ce-") || strings.ToLower(name) != name {
			t.Errorf("header %q: want a lowercase ce- name (nats.go Header.Get is case-sensitive)", name)
		}
	}
	if _, ok := h["ce-runid"]; !ok {
		t.Errorf("headers %v lack ce-runid", h)
	}
}

// TestSDKReaderInterop decodes our binary headers with sdk-go's binding
// reader semantics: for values that need no percent-encoding the sdk-go
// event equals ours.
func TestSDKReaderInterop(t *testing.T) {
	e := fullEvent(t)
	h, body, err := Encode(e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	got, err := binding.ToEvent(context.Background(), &sdkNATSMessage{h: h, body: body})
	if err != nil {
		t.Fatalf("binding.ToEvent: %v", err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("sdk-go event invalid: %v", err)
	}
	if diff := cmp.Diff(attrs(e), attrs(got)); diff != "" {
		t.Errorf("sdk-go reader (-ours +sdk):\n%s", diff)
	}

	// And the other way round: what sdk-go's binary writer would put in the
	// headers (verbatim "ce-" values) decodes with ours.
	ours, err := Decode(h, body)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff(attrs(got), attrs(ours)); diff != "" {
		t.Errorf("Decode (-sdk +ours):\n%s", diff)
	}
}

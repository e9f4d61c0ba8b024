package openai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"

	"github.com/parley-dev/parley/model"
	"github.com/parley-dev/parley/schema"
)

// annotations reads the url_citation annotations of a streamed delta
// (OpenAI's web-search models and OpenRouter stream them as
// delta.annotations, which the SDK keeps as an extra field). Malformed
// annotations are ignored: they are advisory.
func annotations(d oai.ChatCompletionChunkChoiceDelta) []oai.ChatCompletionMessageAnnotation {
	// The SDK marks extra fields as not Valid (they are not in its
	// schema); their raw JSON is kept.
	f, ok := d.JSON.ExtraFields["annotations"]
	if !ok || f.Raw() == "" {
		return nil
	}
	var out []oai.ChatCompletionMessageAnnotation
	if err := json.Unmarshal([]byte(f.Raw()), &out); err != nil {
		return nil
	}
	return out
}

// citations turns the model's url_citation annotations into the message's
// _meta["drupal.org/ai.citations"]: one citation per URL (first title
// wins), in order of first mention, its anchors the annotated spans
// (start_index inclusive, end_index exclusive, in code points of the
// message text, as schema.Anchor). A URL that is not an absolute URI, and a
// span outside the text or empty, is left out; at most schema.MaxCitations
// citations of at most schema.MaxCitationAnchors anchors are kept (later
// ones are left out).
func citations(anns []oai.ChatCompletionMessageAnnotation, text string) []schema.Citation {
	n := utf8.RuneCountInString(text)
	var out []schema.Citation
	index := map[string]int{}
	for _, a := range anns {
		if a.Type != "url_citation" {
			continue
		}
		u := a.URLCitation
		c := schema.Citation{URL: u.URL, Title: truncate(u.Title, schema.MaxCitationTitleBytes)}
		if c.Validate() != nil {
			continue
		}
		i, seen := index[u.URL]
		if !seen {
			if len(out) == schema.MaxCitations {
				continue
			}
			i = len(out)
			index[u.URL] = i
			out = append(out, c)
		}
		start, end := int(u.StartIndex), int(u.EndIndex)
		if start >= 0 && end > start && end <= n && len(out[i].Anchors) < schema.MaxCitationAnchors {
			out[i].Anchors = append(out[i].Anchors, schema.Anchor{Start: start, End: end})
		}
	}
	return out
}

// clipAnchors drops the anchors of cs that do not lie within a text of n
// code points (the suggested-replies line cut from the end of an answer).
func clipAnchors(cs []schema.Citation, n int) []schema.Citation {
	out := make([]schema.Citation, len(cs))
	for i, c := range cs {
		out[i] = c
		out[i].Anchors = nil
		for _, a := range c.Anchors {
			if a.End <= n {
				out[i].Anchors = append(out[i].Anchors, a)
			}
		}
	}
	return out
}

// truncate cuts s to at most max bytes at a character boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}

// caps is what a model takes besides text (AgentSettings.Images, .Audio).
type caps struct {
	images, audio bool
}

// mediaPart returns c as a content part when it is an image or audio
// block meant for the model and the model takes it: images as data-URL
// image parts, audio as input_audio parts (wav and mp3 only, the formats
// the API accepts).
func (k caps) mediaPart(c schema.Content) (oai.ChatCompletionContentPartUnionParam, bool) {
	if !model.ForModel(c) {
		return oai.ChatCompletionContentPartUnionParam{}, false
	}
	switch c := c.(type) {
	case *schema.ImageContent:
		if k.images {
			return oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{
				URL: "data:" + c.MIMEType + ";base64," + c.Data}), true
		}
	case *schema.AudioContent:
		if f := audioFormat(c.MIMEType); k.audio && f != "" {
			return oai.InputAudioContentPart(oai.ChatCompletionContentPartInputAudioInputAudioParam{Data: c.Data, Format: f}), true
		}
	}
	return oai.ChatCompletionContentPartUnionParam{}, false
}

// audioFormat maps an audio MIME type to the API's input_audio format
// ("" when the API takes no such audio).
func audioFormat(mime string) string {
	switch strings.ToLower(strings.TrimSpace(strings.SplitN(mime, ";", 2)[0])) {
	case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave":
		return "wav"
	case "audio/mpeg", "audio/mp3":
		return "mp3"
	}
	return ""
}

// toolMedia is what a tool message says of its media and the parts that
// follow it: the chat-completions API takes only text in a tool message,
// so a result's images and audio the model takes go in a user message
// right after the step's tool messages, each named by its call.
func (k caps) toolMedia(m model.Message) (notes []string, parts []oai.ChatCompletionContentPartUnionParam) {
	if m.Result == nil {
		return nil, nil
	}
	n := 0
	for _, c := range m.Result.Content {
		p, ok := k.mediaPart(c)
		if !ok {
			continue
		}
		n++
		label := fmt.Sprintf("%s result of call %s, item %d", c.ContentType(), m.ToolCallID, n)
		size := 0
		switch c := c.(type) {
		case *schema.ImageContent:
			size = base64.StdEncoding.DecodedLen(len(c.Data))
		case *schema.AudioContent:
			size = base64.StdEncoding.DecodedLen(len(c.Data))
		}
		notes = append(notes, fmt.Sprintf("[%s, about %d bytes: attached in the next user message]", label, size))
		parts = append(parts, oai.TextContentPart(label+":"), p)
	}
	return notes, parts
}

// Package openaitest is a local OpenAI-compatible chat-completions server
// for tests: it answers each request with the next scripted Reply —
// a recorded server-sent-event stream, an HTTP error, or a stream cut
// mid-way — and records the requests it got.
//
// It imports no other parley package.
package openaitest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// Reply is one scripted answer.
type Reply struct {
	// Status is the HTTP status; 0 means 200 with the stream.
	Status int
	// Header is added to the response (e.g. Retry-After).
	Header map[string]string
	// Body is sent as is for an error status (an OpenAI error object).
	Body string
	// File is a recorded SSE stream (text/event-stream) sent for 200.
	File string
	// Events, when File is empty, is the stream sent for 200: each
	// element is the data of one server-sent event ("data: <e>\n\n"), a
	// chat.completion.chunk object or the literal [DONE].
	Events []string
	// CutAfter, when > 0, ends the stream after that many bytes of File,
	// closing the connection without the rest (a stream cut mid-way).
	CutAfter int
	// Replace substitutes strings in File before sending (placeholders).
	Replace map[string]string
}

// Server is the test server. Its zero value is not usable: call New.
type Server struct {
	*httptest.Server
	t       testing.TB
	mu      sync.Mutex
	replies []Reply
	// Requests are the decoded JSON bodies received, in order.
	requests []map[string]any
	headers  []http.Header
}

// New starts a server answering with replies in order; a request beyond
// them fails the test and gets a 500. It is closed when the test ends.
func New(t testing.TB, replies ...Reply) *Server {
	s := &Server{t: t, replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// URL returns the base URL to configure (…/v1).
func (s *Server) URL() string { return s.Server.URL + "/v1" }

// Requests returns the request bodies received so far.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.requests...)
}

// Headers returns the request headers received so far.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// Add appends replies to the script.
func (s *Server) Add(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, replies...)
}

// stream is the SSE text of a 200 reply: File's content, or Events as
// one event each.
func (r *Reply) stream() (string, error) {
	if r.File == "" {
		var b strings.Builder
		for _, e := range r.Events {
			b.WriteString("data: " + e + "\n\n")
		}
		return b.String(), nil
	}
	data, err := os.ReadFile(r.File)
	return string(data), err
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		s.t.Errorf("openaitest: request body is not JSON: %v", err)
	}
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, req)
	s.headers = append(s.headers, r.Header.Clone())
	var rep *Reply
	if n < len(s.replies) {
		rep = &s.replies[n]
	}
	s.mu.Unlock()
	if r.URL.Path != "/v1/chat/completions" {
		s.t.Errorf("openaitest: unexpected path %s", r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if rep == nil {
		s.t.Errorf("openaitest: request %d has no scripted reply", n+1)
		http.Error(w, `{"error":{"message":"no scripted reply","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		_, _ = io.WriteString(w, rep.Body)
		return
	}
	text, err := rep.stream()
	if err != nil {
		s.t.Errorf("openaitest: %v", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for k, v := range rep.Replace {
		text = strings.ReplaceAll(text, k, v)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rep.CutAfter > 0 && rep.CutAfter < len(text) {
		_, _ = io.WriteString(w, text[:rep.CutAfter])
		w.(http.Flusher).Flush()
		// Abort the connection: the client sees the body end early.
		panic(http.ErrAbortHandler)
	}
	// Send event by event, flushing, as a real server streams.
	for _, ev := range strings.SplitAfter(text, "\n\n") {
		_, _ = io.WriteString(w, ev)
		w.(http.Flusher).Flush()
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
)

// fakeApprovals answers approvals requests as a processor would, from a
// fixed list, recording each request.
type fakeApprovals struct {
	mu   sync.Mutex
	got  []events.ApprovalsRequest
	subj []string
}

func (f *fakeApprovals) serve(t *testing.T, b *bus.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = b.Serve(ctx, bus.Endpoint{Service: "fake-processor", Version: "0.1.0", Name: "approvals",
			Subject: events.SubjectApprovalsAll, QueueGroup: "fake"},
			func(ctx context.Context, req *event.Event) (*event.Event, error) {
				in, err := events.Data[events.ApprovalsRequest](req)
				if err != nil {
					return nil, err
				}
				f.mu.Lock()
				f.got = append(f.got, in)
				f.subj = append(f.subj, bus.RequestSubject(ctx))
				f.mu.Unlock()
				a := events.Approval{ID: "a1", Thread: req.Subject(), Agent: "default", Tool: "delete_entities",
					Scope: events.StandingScopeThread, GrantedBy: events.Identity{Principal: "gateway", OnBehalfOf: "owner"},
					GrantedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(), ElicitationID: "e1", Destructive: true}
				reply := events.ApprovalsReply{Thread: req.Subject(), Approvals: []events.Approval{a}}
				if in.Revoke != "" {
					reply.Approvals, reply.Revoked = []events.Approval{}, []events.Approval{a}
				}
				return events.KindApprovalsAnswered.New("/parley/test", events.DerivedID("fake", req.ID()), req.Subject(), reply)
			})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	time.Sleep(100 * time.Millisecond) // the endpoint subscribes
}

// The approvals routes: a member lists, only the owner revokes (a shared
// user is 403, a stranger 404), the gateway asks the processor as the
// owner on its own principal's subject, and the bodies match
// docs/openapi.yaml.
func TestApprovalsRoutes(t *testing.T) {
	o := loadOpenAPI(t)
	g := shareGateways(t, 1)[0]
	f := &fakeApprovals{}
	f.serve(t, g.bus)
	h := g.Handler()
	if w := request(t, h, "POST", "/v1/threads/ap1/messages", ownerTok, `{"text":"hi"}`, nil); w.Code != http.StatusAccepted {
		t.Fatalf("POST message = %d %s", w.Code, w.Body)
	}
	echoInput(t, g, "ap1", events.ChatTurnRequested)
	deadline := time.Now().Add(5 * time.Second)
	for {
		w := request(t, h, "PUT", "/v1/threads/ap1/shares/other", ownerTok, "", nil)
		if w.Code == http.StatusOK && !access(t, w, w.Body.String()).Pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the owner's claim was not accepted: %d %s", w.Code, w.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	w := request(t, h, "GET", "/v1/threads/ap1/approvals", otherTok, "", nil)
	o.check("GET", "/v1/threads/ap1/approvals", w)
	var list ThreadApprovals
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &list) != nil || len(list.Approvals) != 1 {
		t.Fatalf("GET approvals as the shared user = %d %s, want the one approval", w.Code, w.Body)
	}
	w = request(t, h, "DELETE", "/v1/threads/ap1/approvals", otherTok, "", nil)
	o.check("DELETE", "/v1/threads/ap1/approvals", w)
	if w.Code != http.StatusForbidden {
		t.Fatalf("DELETE as the shared user = %d %s, want 403", w.Code, w.Body)
	}
	w = request(t, h, "DELETE", "/v1/threads/ap1/approvals?tool=delete_entities", ownerTok, "", nil)
	o.check("DELETE", "/v1/threads/ap1/approvals", w)
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &list) != nil || len(list.Revoked) != 1 {
		t.Fatalf("DELETE as the owner = %d %s, want the approval revoked", w.Code, w.Body)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 2 || f.got[0].Revoke != "" || f.got[1].Revoke != "delete_entities" ||
		f.got[0].OnBehalfOf != "owner" || f.got[1].OnBehalfOf != "owner" ||
		f.subj[1] != events.ApprovalsSubject(events.PrincipalGateway, "ap1") {
		t.Fatalf("the processor was asked %+v on %v, want a list then a revoke of delete_entities, as the owner", f.got, f.subj)
	}
}

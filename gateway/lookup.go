package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/parley-dev/parley/bus"
	"github.com/parley-dev/parley/events"
	"github.com/parley-dev/parley/schema"
)

// RouteLookupEntities is the entity lookup behind the web chat's
// entity_autocomplete widget (documented in docs/openapi.yaml).
var RouteLookupEntities = Route{http.MethodGet, "/v1/lookup/entities"}

// ReasonLookupUnavailable is the problem reason when no lookup service
// answered (none running, or none within lookupTimeout): a client shows the
// plain field.
const ReasonLookupUnavailable = "lookup_unavailable"

// lookupTimeout bounds the wait for the lookup service's answer.
const lookupTimeout = 2 * time.Second

// lookupEntities answers GET /v1/lookup/entities?q=&type=&bundle=&limit=
// by asking the lookup service over NATS (events.SubjectLookupEntities):
// 200 with events.LookupEntitiesReply; 400 naming the parameter and rule;
// 503 lookup_unavailable when no service answers in time. The user rides
// the request, so a service may filter what that user sees. bundle may be
// repeated or comma-separated.
func (g *Gateway) lookupEntities(w http.ResponseWriter, r *http.Request, user string) {
	q := r.URL.Query()
	req := events.LookupEntitiesRequest{Query: q.Get("q"), TargetType: q.Get("type"), User: user}
	for _, b := range q["bundle"] {
		for s := range strings.SplitSeq(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				req.Bundles = append(req.Bundles, s)
			}
		}
	}
	var vs []schema.Violation
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			vs = append(vs, schema.Violation{Path: "limit", Rule: "must be an integer from 1 to " + strconv.Itoa(events.MaxLookupLimit)})
		} else {
			req.Limit = n
		}
	}
	if err := req.Validate(); err != nil {
		for _, v := range schema.Violations(err) {
			// Name the query parameter, not the request field.
			switch {
			case v.Path == "query":
				v.Path = "q"
			case v.Path == "targetType":
				v.Path = "type"
			case strings.HasPrefix(v.Path, "bundles"):
				v.Path = "bundle" + strings.TrimPrefix(v.Path, "bundles")
			}
			vs = append(vs, v)
		}
	}
	if len(vs) > 0 {
		writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "the lookup is not valid", Errors: vs})
		return
	}
	e, err := events.New(SourceGateway, events.TypeLookupEntitiesRequested, "", req)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), lookupTimeout)
	defer cancel()
	reply, err := g.bus.Request(ctx, events.SubjectLookupEntities, e)
	if err != nil {
		var se *bus.ServiceError
		if errors.As(err, &se) && se.Code == "400" {
			writeProblem(w, Problem{Status: http.StatusBadRequest, Reason: ReasonBadRequest, Detail: "the lookup service refused the lookup: " + se.Description})
			return
		}
		g.log.WarnContext(r.Context(), "entity lookup failed", "error", err)
		w.Header().Set("Retry-After", "5")
		writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Reason: ReasonLookupUnavailable,
			Detail: "no entity lookup service answered; type the value instead"})
		return
	}
	out, err := events.Data[events.LookupEntitiesReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeLookupEntitiesAnswered {
		g.log.WarnContext(r.Context(), "entity lookup: bad reply", "type", reply.Type(), "error", err)
		writeProblem(w, Problem{Status: http.StatusBadGateway, Reason: ReasonLookupUnavailable,
			Detail: "the entity lookup service answered with something other than a lookup reply"})
		return
	}
	if out.Entities == nil {
		out.Entities = []events.LookupEntity{}
	}
	writeJSON(w, http.StatusOK, out)
}

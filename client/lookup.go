package client

import (
	"context"
	"fmt"
	"time"

	"github.com/parley-dev/parley/events"
)

// LookupTimeout bounds LookupEntities' wait for the lookup service's
// answer.
const LookupTimeout = 2 * time.Second

// LookupEntities asks the entity lookup service (the read-only
// request-reply events.SubjectLookupEntities, which the built-in site's
// tool-executor answers and the gateway's GET /v1/lookup/entities uses)
// for the site entities matching r. It reads no tool's storage, so it
// works wherever the principal may make the request. Errors: r's
// validation error (a *schema.ValidationError naming each field); a
// transport error (nats.ErrNoResponders when no service runs, a deadline
// when none answered within LookupTimeout, a *bus.ServiceError when the
// service refused the request); an error naming the reply's type when the
// answer is not a lookup reply.
func (c *Client) LookupEntities(ctx context.Context, r events.LookupEntitiesRequest) (*events.LookupEntitiesReply, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	e, err := events.New(c.source, events.TypeLookupEntitiesRequested, "", r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	defer cancel()
	reply, err := c.bus.Request(ctx, events.SubjectLookupEntities, e)
	if err != nil {
		return nil, fmt.Errorf("looking up entities: %w", err)
	}
	out, err := events.Data[events.LookupEntitiesReply](reply)
	if err != nil || events.TypeOf(reply) != events.TypeLookupEntitiesAnswered {
		return nil, fmt.Errorf("looking up entities: the lookup service answered %s: %v", reply.Type(), err)
	}
	return &out, nil
}

// EntityTitle returns the title (the lookup's label) of the site entity
// with ID id, asking the lookup service (LookupEntities); "" and nil when
// no entity has that ID, or the lookup's answer was cut before it.
func (c *Client) EntityTitle(ctx context.Context, id string) (string, error) {
	reply, err := c.LookupEntities(ctx, events.LookupEntitiesRequest{Query: id, Limit: events.MaxLookupLimit})
	if err != nil {
		return "", err
	}
	for _, e := range reply.Entities {
		if e.ID == id {
			return e.Label, nil
		}
	}
	return "", nil
}

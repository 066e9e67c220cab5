package inboxhandler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// NewJSON returns a handler named name whose messages carry a JSON T: the key is [DefaultKey]'s
// and fn gets the decoded event ([JSON] says how bodies are decoded and checked). It is New(ib,
// name, nil, JSON(fn)).
func NewJSON[T any](ib *inbox.Inbox, name string, fn func(ctx context.Context, tx pgx.Tx, m *worker.Message, event T) error) (*Handler, error) {
	if fn == nil {
		return nil, errors.New("inboxhandler: fn is nil")
	}
	return New(ib, name, nil, JSON(fn))
}

// ErrUnknownType is wrapped by the error of a message whose type no route of a [Router] names.
var ErrUnknownType = errors.New("inboxhandler: no handler for the message's type")

// Unknown is what a [Router] does with a message whose type has no route.
type Unknown int

const (
	// UnknownFail fails the message with an error wrapping [ErrUnknownType] that names the type:
	// it goes the retry-then-DLQ way, counted as failed and logged at each delivery. The default:
	// a type added by a producer before its consumer is deployed waits in the DLQ for a redrive.
	UnknownFail Unknown = iota
	// UnknownDiscard deletes the message without running anything: counted as discarded and
	// logged with its type ([worker.Discard]). For a queue subscribed to a topic whose other
	// event types this worker does not want (an SNS filter policy is the better place for that).
	UnknownDiscard
)

// RouterConfig configures a [Router]. The zero value reads the type from the "type" message
// attribute, and fails a message whose type has no route.
type RouterConfig struct {
	// TypeAttribute is the message attribute that names a message's type. "" means "type".
	// Inside an SNS envelope the worker has already made the notification's attributes the
	// message's.
	TypeAttribute string
	// TypeField is a top-level string field of the JSON body read when the attribute is absent
	// (for producers that write {"type": "OrderPaid", ...}). "" means the body is not read.
	TypeField string
	// TypeOf, if set, replaces both: it returns the message's type, or an error (which fails the
	// message the retry-then-DLQ way).
	TypeOf func(*worker.Message) (string, error)
	// Unknown is what happens to a message whose type has no route (or that has no type).
	Unknown Unknown
}

// Router is a [worker.Handler] and [worker.BatchHandler] for a queue that carries several event
// types: it sends each message to the [Handler] routed for its type, each with its own inbox
// handler name, so that exactly-once holds per handler (the same event id under two types is two
// events). A batch runs in one transaction whatever types it mixes, and on a FIFO queue a group
// keeps its order across types: a message that fails (an unknown type included) holds back the
// rest of its group. Every routed handler must use the same inbox. Add routes before the worker
// starts; a Router is safe for concurrent use once it runs. At start it publishes its routes in
// the inbox ([Router.CheckQueue]), which `sqsinbox redrive` and the console classify by.
type Router struct {
	ib     *inbox.Inbox
	cfg    RouterConfig
	mu     sync.RWMutex
	routes map[string]*Handler
}

// NewRouter returns a router over ib with no routes; cfg may be nil.
func NewRouter(ib *inbox.Inbox, cfg *RouterConfig) (*Router, error) {
	if ib == nil {
		return nil, errors.New("inboxhandler: router: inbox is nil")
	}
	r := &Router{ib: ib, routes: map[string]*Handler{}}
	if cfg != nil {
		r.cfg = *cfg
	}
	if r.cfg.TypeAttribute == "" {
		r.cfg.TypeAttribute = "type"
	}
	if r.cfg.Unknown != UnknownFail && r.cfg.Unknown != UnknownDiscard {
		return nil, fmt.Errorf("inboxhandler: router: RouterConfig.Unknown is %d; use UnknownFail or UnknownDiscard", r.cfg.Unknown)
	}
	return r, nil
}

// Route sends the messages of type typ to h. It refuses an empty type, a type routed already,
// and a handler on another inbox.
func (r *Router) Route(typ string, h *Handler) error {
	switch {
	case typ == "":
		return errors.New("inboxhandler: router: the type is empty")
	case h == nil:
		return fmt.Errorf("inboxhandler: router: type %q: the handler is nil", typ)
	case h.ib != r.ib:
		return fmt.Errorf("inboxhandler: router: type %q: handler %s uses another inbox; a batch commits in one transaction, so every route must share the router's", typ, h.name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.routes[typ]; ok {
		return fmt.Errorf("inboxhandler: router: type %q is routed to handler %s already", typ, old.name)
	}
	r.routes[typ] = h
	return nil
}

// Types returns the routed types, sorted.
func (r *Router) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.routes))
}

// LogValue describes the router for the worker's start-up log line: where a message's type is
// read, each routed type with its handler's name, what happens to an unrouted type, the version
// of the routes it publishes (see [Router.CheckQueue]), and the inbox's schema, retention and
// idle-in-transaction timeout.
func (r *Router) LogValue() slog.Value {
	r.mu.RLock()
	routes := make([]string, 0, len(r.routes))
	for _, typ := range slices.Sorted(maps.Keys(r.routes)) {
		routes = append(routes, typ+"="+r.routes[typ].name)
	}
	r.mu.RUnlock()
	source := "attribute " + r.cfg.TypeAttribute
	switch {
	case r.cfg.TypeOf != nil:
		source = "TypeOf"
	case r.cfg.TypeField != "":
		source += ", else field " + r.cfg.TypeField
	}
	published := r.published("")
	return slog.GroupValue(slog.String("routes", strings.Join(routes, ",")), slog.String("type_source", source),
		slog.String("unknown", published.Unknown), slog.String("routes_version", published.Version()), slog.String("inbox_schema", r.ib.Schema()),
		slog.Duration("inbox_retention", r.ib.Retention()),
		slog.Duration("idle_in_transaction_timeout", r.ib.IdleInTransactionTimeout()))
}

// typeOf returns m's type.
func (r *Router) typeOf(m *worker.Message) (string, error) { return r.cfg.MessageType(m) }

// MessageType returns m's type as a [Router] with this configuration reads it: TypeOf's answer
// when it is set; else the TypeAttribute attribute ("type" when TypeAttribute is ""); else the
// body's TypeField; "" when the message has none. Operator tools use it to find the handler a
// dead-lettered message was routed to, as the worker did.
func (c *RouterConfig) MessageType(m *worker.Message) (string, error) {
	if c.TypeOf != nil {
		return c.TypeOf(m)
	}
	attr := cmp.Or(c.TypeAttribute, "type")
	if v, ok := m.Attribute(attr); ok {
		return v, nil
	}
	if c.TypeField == "" {
		return "", nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(m.Body, &body); err != nil {
		return "", fmt.Errorf("%w: message %s: no %q attribute, and the body is not a JSON object: %w", ErrBadBody, m.ID, attr, err)
	}
	raw, ok := body[c.TypeField]
	if !ok {
		return "", nil
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return "", fmt.Errorf("%w: message %s: the body's %q is not a string: %w", ErrBadBody, m.ID, c.TypeField, err)
	}
	return typ, nil
}

// pick returns the handler for m, or the message's result when it has none.
func (r *Router) pick(m *worker.Message) (*Handler, error) {
	typ, err := r.typeOf(m)
	switch {
	case err != nil && r.cfg.TypeOf != nil:
		return nil, fmt.Errorf("inboxhandler: router: message %s: RouterConfig.TypeOf: %w", m.ID, err)
	case err != nil:
		return nil, err // MessageType's error names the package, the message and what it lacks
	}
	r.mu.RLock()
	h, ok := r.routes[typ]
	r.mu.RUnlock()
	if ok {
		return h, nil
	}
	what := fmt.Sprintf("type %q", typ)
	if typ == "" {
		what = fmt.Sprintf("no type (attribute %q", r.cfg.TypeAttribute)
		if r.cfg.TypeField != "" {
			what += fmt.Sprintf(", body field %q", r.cfg.TypeField)
		}
		what += ")"
	}
	if r.cfg.Unknown == UnknownDiscard {
		return nil, worker.Discard("no handler for " + what)
	}
	return nil, fmt.Errorf("%w: message %s has %s; routed types: %v", ErrUnknownType, m.ID, what, r.Types())
}

// Handle implements [worker.Handler]: it runs m's handler, as [Handler.Handle] does.
func (r *Router) Handle(ctx context.Context, m *worker.Message) error {
	h, err := r.pick(m)
	if err != nil {
		return err
	}
	return h.Handle(ctx, m)
}

// HandleBatch implements [worker.BatchHandler]: the batch's messages run in one transaction of
// the inbox, each with its type's handler, as [Handler.HandleBatch] runs one handler's.
func (r *Router) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	return handleBatch(ctx, r.ib, b, r.pick)
}

// CheckQueue implements [worker.QueueChecker] with the inbox's start-up checks
// ([Handler.CheckQueue]); it refuses to start a router with no routes. Then it publishes the
// routes in the inbox ([inbox.Inbox.PublishRoutes]: where the type is read, each type's handler,
// what an unrouted type gets), so that `sqsinbox redrive` and the console classify the queue's
// dead-lettered messages as this router routes them, without the routes typed again. A failure
// to publish fails the start, as the checks do: the tools would classify by stale routes.
func (r *Router) CheckQueue(ctx context.Context, q *worker.Queue) error {
	if len(r.Types()) == 0 {
		return fmt.Errorf("inboxhandler: router for queue %s has no routes", q.Name)
	}
	// Every route shares the router's inbox, so one check covers them all.
	if err := (&Handler{ib: r.ib}).checkInbox(ctx, q); err != nil {
		return err
	}
	if _, err := r.ib.PublishRoutes(ctx, r.published(q.Name)); err != nil {
		return fmt.Errorf("inboxhandler: router for queue %s: %w", q.Name, err)
	}
	return nil
}

// published is what the router publishes of itself for queue.
func (r *Router) published(queue string) inbox.Routes {
	r.mu.RLock()
	defer r.mu.RUnlock()
	routes := make(map[string]string, len(r.routes))
	for typ, h := range r.routes {
		routes[typ] = h.name
	}
	unknown := "fail"
	if r.cfg.Unknown == UnknownDiscard {
		unknown = "discard"
	}
	return inbox.Routes{Queue: queue, TypeAttribute: r.cfg.TypeAttribute, TypeField: r.cfg.TypeField, TypeFunc: r.cfg.TypeOf != nil,
		Unknown: unknown, Routes: routes}
}

// MaxConcurrency implements [worker.ConcurrencyLimiter] as [Handler.MaxConcurrency] does.
func (r *Router) MaxConcurrency() int { return (&Handler{ib: r.ib}).MaxConcurrency() }

// CheckCapacity implements [worker.CapacityChecker] as [Handler.CheckCapacity] does.
func (r *Router) CheckCapacity(concurrency int) error {
	return (&Handler{ib: r.ib}).CheckCapacity(concurrency)
}

package inbox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Routes is what a queue's router routes: where a message's type is read, the handler of each
// type, and what a type with no route gets; or, for a queue whose worker runs one handler, that
// handler (Handler). A worker whose handler is an inboxhandler.Router or inboxhandler.Handler
// publishes them at start ([Inbox.PublishRoutes]); operator tools read them back
// ([Inbox.PublishedRoutes]) to find the handler a dead-lettered message was routed to, as the
// worker does, without the routes being typed again.
type Routes struct {
	// Queue is the name of the queue the router serves.
	Queue string
	// Handler, for a queue whose worker runs one handler, is that handler's name: every message
	// goes to it, whatever its type. The other fields are then empty.
	Handler string
	// TypeAttribute is the message attribute that names a message's type.
	TypeAttribute string
	// TypeField is the top-level field of the JSON body read when the attribute is absent; ""
	// when the body is not read.
	TypeField string
	// TypeFunc says that a function of the program reads the type instead (RouterConfig.TypeOf):
	// a tool cannot read it, and must be told the types some other way.
	TypeFunc bool
	// Unknown is what a message whose type has no route gets: "fail" or "discard".
	Unknown string
	// Routes maps each routed type to its handler's name.
	Routes map[string]string
}

// Handlers returns the names of the handlers the routes send to, sorted, each once.
func (r *Routes) Handlers() []string {
	if r.Handler != "" {
		return []string{r.Handler}
	}
	return slices.Compact(slices.Sorted(maps.Values(r.Routes)))
}

// Version is a hash of everything the routes say but the queue: the same routes give the same
// version in every process, and any change gives another.
func (r *Routes) Version() string {
	v := struct { // a map's keys are marshalled sorted
		TypeAttribute, TypeField, Unknown string
		TypeFunc                          bool
		Routes                            map[string]string
		Handler                           string `json:",omitempty"` // a router's version is as it was before Handler
	}{r.TypeAttribute, r.TypeField, r.Unknown, r.TypeFunc, r.Routes, r.Handler}
	if len(v.Routes) == 0 {
		v.Routes = nil // none, however given
	}
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func (r *Routes) validate() error {
	switch {
	case r.Queue == "":
		return errors.New("inbox: routes: the queue is empty")
	case r.Handler != "":
		if len(r.Routes) > 0 || r.TypeAttribute != "" || r.TypeField != "" || r.TypeFunc || r.Unknown != "" {
			return fmt.Errorf("inbox: routes of queue %s: one handler (%s) and routes or a type source: give one or the other", r.Queue, r.Handler)
		}
		if err := ValidateHandler(r.Handler); err != nil {
			return fmt.Errorf("inbox: routes of queue %s: %w", r.Queue, err)
		}
		return nil
	case len(r.Routes) == 0:
		return fmt.Errorf("inbox: routes of queue %s: no route", r.Queue)
	case r.Unknown != "fail" && r.Unknown != "discard":
		return fmt.Errorf("inbox: routes of queue %s: Unknown is %q; want fail or discard", r.Queue, r.Unknown)
	}
	for typ, h := range r.Routes {
		if typ == "" {
			return fmt.Errorf("inbox: routes of queue %s: a type is empty", r.Queue)
		}
		if err := ValidateHandler(h); err != nil {
			return fmt.Errorf("inbox: routes of queue %s: type %q: %w", r.Queue, typ, err)
		}
	}
	return nil
}

// PublishedRoutes are a queue's routes as the inbox keeps them: the version a worker published
// last, and the one it replaced.
type PublishedRoutes struct {
	Routes
	// Version is Routes.Version of these routes.
	Version string
	// Instance is the worker instance that published them last ([Config.Instance]).
	Instance string
	// PublishedAt is when this version was first published; ConfirmedAt is the last start that
	// published it again.
	PublishedAt, ConfirmedAt time.Time
	// Previous is the version these routes replaced, or nil when they never changed. Its own
	// Previous is nil: one change back is kept.
	Previous *PublishedRoutes
}

// routesColumns are inbox_routes' columns as PublishedRoutes reads them.
const routesColumns = "version, type_attribute, type_field, type_func, unknown, routes, handler, instance, published_at, confirmed_at, previous"

// PublishRoutes records r as the routes of r.Queue, and returns them as kept. The same version
// as the one kept only confirms it (ConfirmedAt and Instance); another replaces it and keeps it
// as Previous. It is one statement, so it holds no session state (it works behind a pooler in
// transaction mode), and its routes go as text cast to jsonb, which every pgx query mode sends
// alike (bytes in exec or simple-protocol mode would go as bytea's text form, which jsonb refuses). A schema without the routes table (migrated before it) gives an error
// wrapping [ErrNotMigrated]; a role that may not write it, a [*DeploymentError].
func (ib *Inbox) PublishRoutes(ctx context.Context, r Routes) (*PublishedRoutes, error) {
	r.Routes = maps.Clone(r.Routes)
	if err := r.validate(); err != nil {
		return nil, err
	}
	if r.Routes == nil {
		r.Routes = map[string]string{} // a one-handler queue's: {}
	}
	routes, err := json.Marshal(r.Routes)
	if err != nil {
		return nil, fmt.Errorf("inbox: routes of queue %s: %w", r.Queue, err)
	}
	instance := cmp.Or(ib.cfg.Instance, DefaultInstance(ctx))
	t := sqlident.Quote(ib.cfg.Schema, "inbox_routes")
	row := ib.pool.QueryRow(ctx, "INSERT INTO "+t+" AS r (queue, version, type_attribute, type_field, type_func, unknown, routes, handler, instance) "+
		"VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, $9) ON CONFLICT (queue) DO UPDATE SET "+
		"version = EXCLUDED.version, type_attribute = EXCLUDED.type_attribute, type_field = EXCLUDED.type_field, "+
		"type_func = EXCLUDED.type_func, unknown = EXCLUDED.unknown, routes = EXCLUDED.routes, handler = EXCLUDED.handler, instance = EXCLUDED.instance, "+
		"confirmed_at = now(), "+
		"published_at = CASE WHEN r.version = EXCLUDED.version THEN r.published_at ELSE now() END, "+
		"previous = CASE WHEN r.version = EXCLUDED.version THEN r.previous ELSE to_jsonb(r) - 'previous' END "+
		"RETURNING "+routesColumns,
		r.Queue, r.Version(), r.TypeAttribute, r.TypeField, r.TypeFunc, r.Unknown, string(routes), r.Handler, instance)
	p, err := scanRoutes(row, r.Queue)
	if err != nil {
		return nil, ib.routesError("publish", r.Queue, err)
	}
	return p, nil
}

// PublishedRoutes returns the routes published for queue, or nil when none were. A schema
// without the routes table gives an error wrapping [ErrNotMigrated].
func (ib *Inbox) PublishedRoutes(ctx context.Context, queue string) (*PublishedRoutes, error) {
	row := ib.pool.QueryRow(ctx, "SELECT "+routesColumns+" FROM "+sqlident.Quote(ib.cfg.Schema, "inbox_routes")+" WHERE queue = $1", queue)
	p, err := scanRoutes(row, queue)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, ib.routesError("read", queue, err)
	}
	return p, nil
}

func (ib *Inbox) routesError(what, queue string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "42P01" || pgErr.Code == "3F000":
			return fmt.Errorf("%w: schema %q has no inbox_routes table (it was migrated before the routes were published); "+
				"run `sqsinbox migrate up` (or inbox.Migrate): %w", ErrNotMigrated, ib.cfg.Schema, err)
		case deploymentCode(pgErr.Code):
			return fmt.Errorf("inbox: %s the routes of queue %s in %s.inbox_routes: %w", what, queue, ib.cfg.Schema, &DeploymentError{Err: pgErr})
		}
	}
	return fmt.Errorf("inbox: %s the routes of queue %s: %w", what, queue, err)
}

// routesJSON is a row of inbox_routes as to_jsonb writes it (the previous version).
type routesJSON struct {
	Version       string            `json:"version"`
	TypeAttribute string            `json:"type_attribute"`
	TypeField     string            `json:"type_field"`
	TypeFunc      bool              `json:"type_func"`
	Unknown       string            `json:"unknown"`
	Routes        map[string]string `json:"routes"`
	Handler       string            `json:"handler"`
	Instance      string            `json:"instance"`
	PublishedAt   time.Time         `json:"published_at"`
	ConfirmedAt   time.Time         `json:"confirmed_at"`
}

func scanRoutes(row pgx.Row, queue string) (*PublishedRoutes, error) {
	p := &PublishedRoutes{Routes: Routes{Queue: queue}}
	var prev []byte
	if err := row.Scan(&p.Version, &p.TypeAttribute, &p.TypeField, &p.TypeFunc, &p.Unknown, &p.Routes.Routes, &p.Handler, &p.Instance,
		&p.PublishedAt, &p.ConfirmedAt, &prev); err != nil {
		return nil, err
	}
	if prev != nil {
		var j routesJSON
		if err := json.Unmarshal(prev, &j); err != nil {
			return nil, fmt.Errorf("the previous routes of queue %s: %w", queue, err)
		}
		p.Previous = &PublishedRoutes{Routes: Routes{Queue: queue, TypeAttribute: j.TypeAttribute, TypeField: j.TypeField,
			TypeFunc: j.TypeFunc, Unknown: j.Unknown, Routes: j.Routes, Handler: j.Handler}, Version: j.Version, Instance: j.Instance,
			PublishedAt: j.PublishedAt, ConfirmedAt: j.ConfirmedAt}
	}
	return p, nil
}

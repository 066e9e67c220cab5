package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestPublishRoutesKeepsThePreviousVersion (PostgreSQL): published routes read back as they
// were given; publishing the same version again only confirms it (same version and
// PublishedAt, no Previous); publishing changed routes gives another version and keeps the one
// it replaced as Previous; a queue with none reads as nil; routes without a route or with a bad
// handler name are refused.
func TestPublishRoutesKeepsThePreviousVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-1"})
	ctx := t.Context()
	r := inbox.Routes{Queue: "orders", TypeAttribute: "type", TypeField: "type", Unknown: "fail",
		Routes: map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped"}}
	p1, err := b.ib.PublishRoutes(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ib.PublishedRoutes(ctx, "orders")
	if err != nil || got == nil {
		t.Fatalf("PublishedRoutes: %v, %v", got, err)
	}
	if got.Version != r.Version() || got.Version != p1.Version || got.Instance != "task-1" || got.TypeField != "type" || got.TypeAttribute != "type" ||
		got.Unknown != "fail" || got.TypeFunc || !maps.Equal(got.Routes.Routes, r.Routes) || got.Previous != nil || got.PublishedAt.IsZero() {
		t.Fatalf("read back %+v; want %+v, version %s, by task-1, no previous", got, r, r.Version())
	}
	if hs := got.Handlers(); strings.Join(hs, ",") != "orders-paid,orders-shipped" {
		t.Errorf("Handlers() = %v", hs)
	}

	again, err := b.ib.PublishRoutes(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if again.Version != p1.Version || !again.PublishedAt.Equal(p1.PublishedAt) || again.ConfirmedAt.Before(p1.ConfirmedAt) || again.Previous != nil {
		t.Errorf("the same routes again: %+v; want version %s published at %v, confirmed again, no previous", again, p1.Version, p1.PublishedAt)
	}

	changed := r
	changed.Routes = map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped", "OrderCancelled": "orders-cancel"}
	if _, err := b.ib.PublishRoutes(ctx, changed); err != nil {
		t.Fatal(err)
	}
	got, err = b.ib.PublishedRoutes(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	switch prev := got.Previous; {
	case got.Version == p1.Version || got.Routes.Routes["OrderCancelled"] != "orders-cancel":
		t.Errorf("after a change: version %s, routes %v; want a new version with OrderCancelled", got.Version, got.Routes.Routes)
	case prev == nil || prev.Version != p1.Version || !maps.Equal(prev.Routes.Routes, r.Routes) || prev.TypeField != "type" ||
		!prev.PublishedAt.Equal(p1.PublishedAt) || prev.Instance != "task-1":
		t.Errorf("after a change, previous is %+v; want version %s with the first routes, published at %v", prev, p1.Version, p1.PublishedAt)
	}

	if none, err := b.ib.PublishedRoutes(ctx, "payments"); none != nil || err != nil {
		t.Errorf("a queue with no routes: %v, %v; want nil, nil", none, err)
	}
	for _, bad := range []inbox.Routes{
		{Queue: "orders", Unknown: "fail"},
		{Queue: "orders", Unknown: "fail", Routes: map[string]string{"OrderPaid": ""}},
		{Queue: "", Unknown: "fail", Routes: map[string]string{"OrderPaid": "p"}},
		{Queue: "orders", Unknown: "maybe", Routes: map[string]string{"OrderPaid": "p"}},
	} {
		if _, err := b.ib.PublishRoutes(ctx, bad); err == nil {
			t.Errorf("PublishRoutes(%+v) passed", bad)
		}
	}
}

// TestPublishOneHandler (PostgreSQL): a queue whose worker runs one handler publishes its name:
// it reads back as Handler with no routes, its version differs from a router's, a router that
// replaces it keeps it as Previous, and one handler with routes or a type source, or a bad name,
// is refused.
func TestPublishOneHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-1"})
	ctx := t.Context()
	one := inbox.Routes{Queue: "payments", Handler: "payments-ledger"}
	if _, err := b.ib.PublishRoutes(ctx, one); err != nil {
		t.Fatal(err)
	}
	got, err := b.ib.PublishedRoutes(ctx, "payments")
	if err != nil || got == nil {
		t.Fatalf("PublishedRoutes: %v, %v", got, err)
	}
	if got.Handler != "payments-ledger" || len(got.Routes.Routes) != 0 || got.Version != one.Version() || got.Unknown != "" {
		t.Fatalf("read back %+v; want handler payments-ledger, no routes, version %s", got, one.Version())
	}
	if hs := got.Handlers(); strings.Join(hs, ",") != "payments-ledger" {
		t.Errorf("Handlers() = %v, want [payments-ledger]", hs)
	}
	router := inbox.Routes{Queue: "payments", TypeAttribute: "type", Unknown: "fail", Routes: map[string]string{"PaymentTaken": "payments-ledger"}}
	if router.Version() == one.Version() {
		t.Errorf("a router and a single handler share version %s", one.Version())
	}
	if _, err := b.ib.PublishRoutes(ctx, router); err != nil {
		t.Fatal(err)
	}
	if got, err = b.ib.PublishedRoutes(ctx, "payments"); err != nil || got.Handler != "" || got.Previous == nil || got.Previous.Handler != "payments-ledger" {
		t.Errorf("a router after one handler: %+v (%v); want no handler, and the handler as previous", got, err)
	}
	for _, bad := range []inbox.Routes{
		{Queue: "payments", Handler: "payments-ledger", Routes: map[string]string{"PaymentTaken": "x"}},
		{Queue: "payments", Handler: "payments-ledger", TypeAttribute: "type"},
		{Queue: "payments", Handler: "payments-ledger", Unknown: "fail"},
		{Queue: "payments", Handler: strings.Repeat("h", inbox.MaxHandlerLen+1)},
	} {
		if _, err := b.ib.PublishRoutes(ctx, bad); err == nil {
			t.Errorf("PublishRoutes(%+v) passed", bad)
		}
	}
}

// TestPublishRoutesOnAnOldSchemaOrWithoutAGrant (PostgreSQL): on a schema migrated before the
// routes table, reading or publishing routes gives an error wrapping ErrNotMigrated that says to
// migrate; a role that may not write the table gets a DeploymentError (ErrBrokenDeployment).
func TestPublishRoutesOnAnOldSchemaOrWithoutAGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	r := inbox.Routes{Queue: "orders", TypeAttribute: "type", Unknown: "fail", Routes: map[string]string{"OrderPaid": "orders-paid"}}

	role := "routes_ro_" + randHex(4)
	if _, err := b.pool.Exec(ctx, "CREATE ROLE "+role+"; GRANT USAGE ON SCHEMA "+b.schema+" TO "+role+
		"; GRANT SELECT ON ALL TABLES IN SCHEMA "+b.schema+" TO "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.WithoutCancel(ctx), "DROP OWNED BY "+role+"; DROP ROLE "+role)
	})
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	ro, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	ibRO, err := inbox.New(ro, &inbox.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	var de *inbox.DeploymentError
	if _, err := ibRO.PublishRoutes(ctx, r); !errors.As(err, &de) || !errors.Is(err, inbox.ErrBrokenDeployment) || !strings.Contains(err.Error(), "inbox_routes") {
		t.Errorf("publish without the grant: %v; want a DeploymentError naming inbox_routes", err)
	}

	// Revert the routes' migration and the ones after it (their numbers are not written here).
	ms, err := inbox.Migrations(ctx, b.pool, b.schema)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, m := range ms {
		if m.Name == "routes" {
			steps = len(ms) - m.Version + 1
		}
	}
	if steps == 0 {
		t.Fatal("no migration named routes")
	}
	if _, err := inbox.MigrateDown(ctx, b.pool, b.schema, steps); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ib.PublishRoutes(ctx, r); !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), "sqsinbox migrate up") {
		t.Errorf("publish on the old schema: %v; want ErrNotMigrated saying to migrate", err)
	}
	if _, err := b.ib.PublishedRoutes(ctx, "orders"); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("read on the old schema: %v; want ErrNotMigrated", err)
	}
	if err := b.ib.Check(ctx); err == nil {
		t.Errorf("Check passed on a schema without the routes table")
	}
}

// TestPublishRoutesBehindAPooler (PostgreSQL, PgBouncer in transaction mode with other clients'
// statements on it), in each pgx query mode that works behind it: eight workers starting at once,
// each with a pool of its own through the pooler, publish the same routes, then eight publish
// changed ones, and the routes are read back through the pooler. Every publish succeeds; the
// routes read back are the changed ones, with the first version, never the changed one itself,
// kept as Previous: the write is one statement, with no session state for the pooler to split.
func TestPublishRoutesBehindAPooler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	bouncer, err := pgbouncer.Start(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Close)
	traffic, err := bouncer.StartTraffic(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := traffic.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} { // describe_exec fails behind PgBouncer 1.18 whatever the statement
		publishConcurrently(t, b, bouncer, mode)
	}
	if traffic.Statements() == 0 {
		t.Error("the other clients ran no statement on the pooler")
	}
}

// publishConcurrently is TestPublishRoutesBehindAPooler for one pgx query mode, on a queue of its
// own.
func publishConcurrently(t *testing.T, b *bundle, bouncer *pgbouncer.Bouncer, mode string) {
	t.Helper()
	ctx := t.Context()
	inboxes := make([]*inbox.Inbox, 8)
	for i := range inboxes {
		pool, err := pgxpool.New(ctx, bouncer.URL+"&default_query_exec_mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if inboxes[i], err = inbox.New(pool, &inbox.Config{Schema: b.schema, Instance: fmt.Sprintf("task-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	first := inbox.Routes{Queue: "orders-" + mode, TypeAttribute: "type", Unknown: "fail", Routes: map[string]string{"OrderPaid": "orders-paid"}}
	changed := first
	changed.Routes = map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped"}
	for _, r := range []inbox.Routes{first, changed} {
		var wg sync.WaitGroup
		errs := make(chan error, len(inboxes))
		for _, ib := range inboxes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := ib.PublishRoutes(ctx, r); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: publish through the pooler: %v\n%s", mode, err, bouncer.Output())
		}
	}
	got, err := inboxes[0].PublishedRoutes(ctx, first.Queue)
	if err != nil || got == nil {
		t.Fatalf("%s: PublishedRoutes: %v, %v", mode, got, err)
	}
	if got.Version != changed.Version() || got.Previous == nil || got.Previous.Version != first.Version() || !maps.Equal(got.Previous.Routes.Routes, first.Routes) {
		t.Errorf("%s: read back version %s, previous %+v; want %s with %s kept as previous", mode, got.Version, got.Previous, changed.Version(), first.Version())
	}
}

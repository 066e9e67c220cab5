package inbox_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

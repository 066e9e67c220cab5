package inbox_test

import (
	"context"

	"errors"
	"github.com/jackc/pgx/v5"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/migrate"
)

func tableExists(t *testing.T, pool *pgxpool.Pool, schema, table string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", schema+"."+table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := t.Context()
	schema := "m_" + randHex(4)
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is created on first use: an unmigrated schema is refused.
	if err := ib.Check(ctx); !errors.Is(err, migrate.ErrBehind) || !strings.Contains(err.Error(), "migrate up") {
		t.Fatalf("Check before Migrate = %v, want ErrBehind naming the fix", err)
	}
	if _, err := ib.Run(ctx, "h", "k", nil); err == nil {
		t.Fatal("Run on an unmigrated schema succeeded")
	}
	if tableExists(t, pool, schema, "processed_messages") {
		t.Fatal("Run created the table implicitly")
	}
	applied, err := inbox.Migrate(ctx, pool, schema)
	if err != nil || len(applied) == 0 || applied[0] != 1 {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	if again, err := inbox.Migrate(ctx, pool, schema); err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing to do", again, err)
	}
	if !tableExists(t, pool, schema, "processed_messages") {
		t.Fatal("no table after Migrate")
	}
	if err := ib.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
	st, err := inbox.Migrations(ctx, pool, schema)
	if err != nil || len(st) != len(applied) || st[0].AppliedAt.IsZero() {
		t.Fatalf("Migrations = %+v, %v", st, err)
	}
	reverted, err := inbox.MigrateDownAll(ctx, pool, schema)
	if err != nil || len(reverted) != len(applied) || reverted[len(reverted)-1] != 1 {
		t.Fatalf("MigrateDownAll = %v, %v", reverted, err)
	}
	if tableExists(t, pool, schema, "processed_messages") {
		t.Fatal("table still there after MigrateDown")
	}
	if st, err := inbox.Migrations(ctx, pool, schema); err != nil || !st[0].AppliedAt.IsZero() {
		t.Fatalf("Migrations after down = %+v, %v; want pending", st, err)
	}
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if out, err := ib.Run(ctx, "h", "k", func(context.Context, pgx.Tx) error { return nil }); err != nil || out != inbox.Processed {
		t.Fatalf("Run after up/down/up = %v, %v", out, err)
	}
}

// TestMigrateDownNeedsExplicitSteps: a zero or negative count (an unset field, a parse that
// failed to 0) must not mean "revert everything".
func TestMigrateDownNeedsExplicitSteps(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := t.Context()
	schema := "m_" + randHex(4)
	applied, err := inbox.Migrate(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, steps := range []int{0, -1} {
		reverted, err := inbox.MigrateDown(ctx, pool, schema, steps)
		if err == nil || !strings.Contains(err.Error(), "MigrateDownAll") || len(reverted) != 0 {
			t.Fatalf("MigrateDown(steps %d) = %v, %v; want an error naming MigrateDownAll and nothing reverted", steps, reverted, err)
		}
		if !tableExists(t, pool, schema, "processed_messages") || !tableExists(t, pool, schema, "idempotency_keys") {
			t.Fatalf("MigrateDown(steps %d) dropped tables", steps)
		}
	}
	reverted, err := inbox.MigrateDown(ctx, pool, schema, 1)
	if err != nil || len(reverted) != 1 || reverted[0] != applied[len(applied)-1] {
		t.Fatalf("MigrateDown(1) = %v, %v; want the last of %v", reverted, err, applied)
	}
}

func TestConcurrentMigratorsApplyOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 8)
	schema := "m_" + randHex(4)
	errs := make(chan error, 4)
	total := make(chan int, 4)
	for range 4 {
		go func() {
			v, err := inbox.Migrate(t.Context(), pool, schema)
			errs <- err
			total <- len(v)
		}()
	}
	sum := 0
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		sum += <-total
	}
	st, _ := inbox.Migrations(t.Context(), pool, schema)
	if sum != len(st) {
		t.Fatalf("4 concurrent migrators applied %d migrations in all, want %d", sum, len(st))
	}
}

func TestHostileSchemaNamesAreRejected(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 2)
	for _, s := range []string{`x"; DROP TABLE users; --`, "Public", "a.b", "1abc", "a b", "schema-name",
		strings.Repeat("a", 64), "é", "x\x00"} {
		if _, err := inbox.New(pool, &inbox.Config{Schema: s}); err == nil || !strings.Contains(err.Error(), "Config.Schema") {
			t.Errorf("New(Schema %q) = %v, want an error naming Config.Schema", s, err)
		}
		if _, err := inbox.Migrate(t.Context(), pool, s); err == nil {
			t.Errorf("Migrate(%q) succeeded", s)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 1)
	for _, tc := range []struct {
		cfg   inbox.Config
		field string
	}{
		{inbox.Config{Retention: -1}, "Config.Retention"},
		{inbox.Config{PurgeInterval: -1}, "Config.PurgeInterval"},
		{inbox.Config{PurgeBatchSize: -5}, "Config.PurgeBatchSize"},
	} {
		if _, err := inbox.New(pool, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := inbox.New(nil, nil); err == nil {
		t.Error("New(nil pool) succeeded")
	}
}

package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

func asRetention(err error, re **inbox.RetentionError) bool { return errors.As(err, re) }

func TestDurabilityGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	async, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(async.Close)

	ib, err := inbox.New(async, &inbox.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Check(t.Context()); !errors.Is(err, inbox.ErrAsyncCommit) {
		t.Fatalf("Check with synchronous_commit=off = %v, want ErrAsyncCommit", err)
	}
	accepting, err := inbox.New(async, &inbox.Config{Schema: b.schema, AcceptAsyncCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := accepting.Check(t.Context()); err != nil {
		t.Fatalf("Check with AcceptAsyncCommit = %v, want nil", err)
	}
	// The default server setting passes.
	if err := b.ib.CheckDurability(t.Context()); err != nil {
		t.Fatalf("CheckDurability on the default server: %v", err)
	}
}

func TestDurabilityGuardSeesADatabaseSetting(t *testing.T) {
	t.Parallel()
	admin, err := pgx.Connect(t.Context(), db.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(t.Context()))
	name := "async_" + randHex(4)
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	if _, err := admin.Exec(t.Context(), "ALTER DATABASE "+name+" SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CheckDurability(t.Context()); !errors.Is(err, inbox.ErrAsyncCommit) {
		t.Fatalf("CheckDurability on a database with synchronous_commit=off = %v, want ErrAsyncCommit", err)
	}
}

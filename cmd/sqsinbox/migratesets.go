package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// migrationSet is one set of migrations of a schema, with its own version table: the inbox's
// or the outbox's.
type migrationSet struct {
	name   string
	up     func(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error)
	down   func(ctx context.Context, pool *pgxpool.Pool, schema string, steps int) ([]int, error) // steps 0: all
	status func(ctx context.Context, pool *pgxpool.Pool, schema string) ([]inbox.MigrationStatus, error)
}

var inboxSet = migrationSet{
	name: "inbox",
	up:   inbox.Migrate,
	down: func(ctx context.Context, pool *pgxpool.Pool, schema string, steps int) ([]int, error) {
		if steps == 0 {
			return inbox.MigrateDownAll(ctx, pool, schema)
		}
		return inbox.MigrateDown(ctx, pool, schema, steps)
	},
	status: inbox.Migrations,
}

var outboxSet = migrationSet{
	name: "outbox",
	up:   outbox.Migrate,
	down: func(ctx context.Context, pool *pgxpool.Pool, schema string, steps int) ([]int, error) {
		if steps == 0 {
			return outbox.MigrateDownAll(ctx, pool, schema)
		}
		return outbox.MigrateDown(ctx, pool, schema, steps)
	},
	status: outboxMigrations,
}

// migrationSets is the sets that --only names: both when it is empty, inbox first.
func migrationSets(only string) ([]migrationSet, error) {
	switch only {
	case "":
		return []migrationSet{inboxSet, outboxSet}, nil
	case "inbox":
		return []migrationSet{inboxSet}, nil
	case "outbox":
		return []migrationSet{outboxSet}, nil
	}
	return nil, fmt.Errorf("%w: --only %q: want inbox or outbox", errUsage, only)
}

// outboxMigrations lists the outbox's migrations of schema (outbox.Migrations) as the inbox's
// are listed, so that migrate status and down treat both sets alike.
func outboxMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]inbox.MigrationStatus, error) {
	st, err := outbox.Migrations(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	out := make([]inbox.MigrationStatus, len(st))
	for i, s := range st {
		out[i] = inbox.MigrationStatus(s)
	}
	return out, nil
}

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
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
			// The outbox has no MigrateDownAll: revert as many as are applied.
			st, err := outboxMigrations(ctx, pool, schema)
			if err != nil {
				return nil, err
			}
			for _, s := range st {
				if !s.AppliedAt.IsZero() {
					steps++
				}
			}
			if steps == 0 {
				return nil, nil
			}
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

// knownOutboxMigrations are the outbox's migrations, and the tables each one's down drops. The
// outbox package lists neither (it has Migrate and MigrateDown only), so they are written here;
// TestOutboxMigrationsAreKnown fails when the package gains one that is not.
var knownOutboxMigrations = []inbox.MigrationStatus{
	{Version: 1, Name: "outbox_messages", Drops: []string{"outbox_messages"}},
}

// outboxMigrations lists the outbox's migrations of schema and when each was applied, from its
// version table (outbox.VersionTable). It creates nothing.
func outboxMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]inbox.MigrationStatus, error) {
	if err := sqlident.Validate("schema", schema); err != nil {
		return nil, err
	}
	out := slices.Clone(knownOutboxMigrations)
	table := sqlident.Quote(schema, outbox.VersionTable)
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", schema, outbox.VersionTable, err)
	}
	if !exists {
		return out, nil
	}
	rows, err := pool.Query(ctx, "SELECT version, name, applied_at FROM "+table+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", schema, outbox.VersionTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			v    int
			name string
			at   time.Time
		)
		if err := rows.Scan(&v, &name, &at); err != nil {
			return nil, err
		}
		i := slices.IndexFunc(out, func(s inbox.MigrationStatus) bool { return s.Version == v })
		if i < 0 {
			out = append(out, inbox.MigrationStatus{Version: v, Name: name})
			i = len(out) - 1
		}
		out[i].AppliedAt = at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", schema, outbox.VersionTable, err)
	}
	slices.SortFunc(out, func(a, b inbox.MigrationStatus) int { return a.Version - b.Version })
	return out, nil
}

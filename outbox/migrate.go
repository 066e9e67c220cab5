package outbox

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// VersionTable is the table of the schema that records the outbox's applied migrations; the
// inbox's are in schema_migrations, so both can share a schema.
const VersionTable = "outbox_schema_migrations"

func newMigrator(pool *pgxpool.Pool, schema string) (*migrate.Migrator, error) {
	return migrate.New(pool, migrationFS, "migrations", schema, VersionTable)
}

// Migrate applies the outbox's pending migrations to schema (empty means DefaultSchema) and
// returns the versions applied. It is the only thing that creates the outbox's table. Two
// concurrent calls are serialised by an advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	mg, err := newMigrator(pool, cmp.Or(schema, DefaultSchema))
	if err != nil {
		return nil, err
	}
	return mg.Up(ctx)
}

// MigrateDown reverts the last steps applied migrations of schema, newest first, and returns
// the versions reverted: it drops the outbox's table with every unsent event in it. steps must
// be at least 1.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, schema string, steps int) ([]int, error) {
	if steps < 1 {
		return nil, fmt.Errorf("outbox: MigrateDown needs steps >= 1, got %d", steps)
	}
	mg, err := newMigrator(pool, cmp.Or(schema, DefaultSchema))
	if err != nil {
		return nil, err
	}
	return mg.Down(ctx, steps)
}

// MigrateDownAll reverts every applied migration of schema, newest first, and returns the
// versions reverted. It drops the outbox's table with every unsent event in it.
func MigrateDownAll(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	mg, err := newMigrator(pool, cmp.Or(schema, DefaultSchema))
	if err != nil {
		return nil, err
	}
	return mg.DownAll(ctx)
}

// MigrationStatus is one of the outbox's migrations and when it was applied (zero if pending).
// It has the fields of inbox.MigrationStatus, so that a tool can list both alike.
type MigrationStatus struct {
	Version   int
	Name      string
	AppliedAt time.Time
	// Drops are the tables of the schema that reverting this migration drops, with their rows:
	// what [MigrateDown] would destroy.
	Drops []string
}

// Migrations lists the outbox's migrations of schema (empty means DefaultSchema), each with
// when it was applied, from the version table ([VersionTable]). It creates nothing.
func Migrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]MigrationStatus, error) {
	mg, err := newMigrator(pool, cmp.Or(schema, DefaultSchema))
	if err != nil {
		return nil, err
	}
	st, err := mg.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: migrations of %s: %w", cmp.Or(schema, DefaultSchema), err)
	}
	out := make([]MigrationStatus, len(st))
	for i, s := range st {
		out[i] = MigrationStatus{Version: s.Version, Name: s.Name, AppliedAt: s.AppliedAt, Drops: s.Drops}
	}
	return out, nil
}

// MigrationVersions returns the highest of the outbox's migrations applied to schema (empty
// means DefaultSchema; 0 when none) and the highest this binary knows, so that a caller can tell
// a schema that is behind from one that a newer release has migrated further. It creates
// nothing.
func MigrationVersions(ctx context.Context, pool *pgxpool.Pool, schema string) (applied, known int, err error) {
	mg, err := newMigrator(pool, cmp.Or(schema, DefaultSchema))
	if err != nil {
		return 0, 0, err
	}
	applied, err = mg.Current(ctx)
	return applied, mg.Latest(), err
}

package inbox

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

const versionTable = "schema_migrations"

func newMigrator(pool *pgxpool.Pool, schema string) (*migrate.Migrator, error) {
	return migrate.New(pool, migrationFS, "migrations", schema, versionTable)
}

// MigrationStatus is one of the inbox's migrations and when it was applied (zero if pending).
type MigrationStatus struct {
	Version   int
	Name      string
	AppliedAt time.Time
	// Drops are the tables of the schema that reverting this migration drops, with their rows:
	// what [MigrateDown] would destroy.
	Drops []string
}

// Migrate applies the inbox's pending migrations to schema (empty means DefaultSchema) and
// returns the versions applied. It is the only thing that creates the inbox's tables. Two
// concurrent calls are serialised by an advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	mg, err := newMigrator(pool, orDefault(schema))
	if err != nil {
		return nil, err
	}
	return mg.Up(ctx)
}

// MigrateDown reverts the last steps applied migrations of schema, newest first, and returns
// the versions reverted. It drops the inbox's tables and what they remember (see
// MigrationStatus.Drops).
//
// steps must be at least 1; 0 or less is an error that reverts nothing. Reverting everything
// is [MigrateDownAll], a call of its own, because a count of 0 is what an unset field or a
// failed parse yields, and it must not mean "drop every table".
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, schema string, steps int) ([]int, error) {
	if steps < 1 {
		return nil, fmt.Errorf("inbox: MigrateDown needs steps >= 1, got %d (to revert every migration, call MigrateDownAll)", steps)
	}
	mg, err := newMigrator(pool, orDefault(schema))
	if err != nil {
		return nil, err
	}
	return mg.Down(ctx, steps)
}

// MigrateDownAll reverts every applied migration of schema, newest first, and returns the
// versions reverted. It drops all of the inbox's tables, with every row they hold.
func MigrateDownAll(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	mg, err := newMigrator(pool, orDefault(schema))
	if err != nil {
		return nil, err
	}
	return mg.DownAll(ctx)
}

// Migrations lists the inbox's migrations of schema and when each was applied.
func Migrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]MigrationStatus, error) {
	mg, err := newMigrator(pool, orDefault(schema))
	if err != nil {
		return nil, err
	}
	st, err := mg.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MigrationStatus, len(st))
	for i, s := range st {
		out[i] = MigrationStatus{Version: s.Version, Name: s.Name, AppliedAt: s.AppliedAt, Drops: s.Drops}
	}
	return out, nil
}

// MigrationVersions returns the highest of the inbox's migrations applied to schema (0 when none)
// and the highest this binary knows, so that a caller can tell a schema that is behind from one
// that a newer release has migrated further. It reads only: it creates nothing.
func MigrationVersions(ctx context.Context, pool *pgxpool.Pool, schema string) (applied, known int, err error) {
	mg, err := newMigrator(pool, orDefault(schema))
	if err != nil {
		return 0, 0, err
	}
	applied, err = mg.Current(ctx)
	return applied, mg.Latest(), err
}

func orDefault(schema string) string {
	if schema == "" {
		return DefaultSchema
	}
	return schema
}

package outbox

import (
	"cmp"
	"context"
	"embed"
	"fmt"

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

// Package migrate applies numbered, embedded up and down SQL migrations to a schema. The inbox's
// own migrations run through it (inbox.Migrate and `sqsinbox migrate` wrap it), and it is public
// so that a service built on sqsinbox can ship its own tables the same way, as the examples do,
// or run the inbox's migrations from its own deployment tool.
//
// Files are named NNNN_name.up.sql and NNNN_name.down.sql. The text {{schema}} in a file is
// replaced by the quoted schema name. Applied versions are recorded in a table of the schema.
// Each migration runs in its own transaction, which takes a transaction-scoped advisory lock and
// reads the version table again under it, so migrators of the same schema and table running at
// once apply each migration once, in order. Nothing is kept on a session: migrations run through a
// transaction pooler (PgBouncer in transaction mode, RDS Proxy) as they do on a direct connection.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
	// Drops are the tables of the schema that Down drops (DROP TABLE {{schema}}.name), so a
	// caller can see what a revert would destroy before it runs.
	Drops []string
}

// Status is a migration and whether and when it was applied.
type Status struct {
	Migration
	AppliedAt time.Time // zero when pending
}

// Migrator applies a set of migrations to one schema.
type Migrator struct {
	pool         *pgxpool.Pool
	schema       string
	versionTable string
	migrations   []Migration
}

var (
	fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)
	// dropTable finds the table list of a DROP TABLE statement.
	dropTable = regexp.MustCompile(`(?is)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([^;]+?)\s*(?:\bCASCADE\b|\bRESTRICT\b|;|$)`)
	// schemaTable is one entry of that list that names a table of the migrated schema.
	schemaTable = regexp.MustCompile(`^\{\{schema\}\}\."?([a-z_][a-z0-9_]*)"?$`)
)

// droppedTables lists the tables of {{schema}} that the raw SQL of a down migration drops.
func droppedTables(sql string) []string {
	var out []string
	for _, m := range dropTable.FindAllStringSubmatch(sql, -1) {
		for name := range strings.SplitSeq(m[1], ",") {
			if t := schemaTable.FindStringSubmatch(strings.TrimSpace(name)); t != nil {
				out = append(out, t[1])
			}
		}
	}
	return out
}

// New loads the migrations in dir of fsys. schema and versionTable must be valid identifiers.
func New(pool *pgxpool.Pool, fsys fs.FS, dir, schema, versionTable string) (*Migrator, error) {
	if err := sqlident.Validate("schema", schema); err != nil {
		return nil, err
	}
	if err := sqlident.Validate("version table", versionTable); err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	byVersion := map[int]*Migration{}
	quoted := sqlident.Quote(schema)
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrate: %s: file name does not match NNNN_name.up|down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		sql := strings.ReplaceAll(string(b), "{{schema}}", quoted)
		if m[3] == "up" {
			mig.Up = sql
		} else {
			mig.Down = sql
			mig.Drops = droppedTables(string(b))
		}
	}
	mg := &Migrator{pool: pool, schema: schema, versionTable: versionTable}
	for v, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrate: version %04d needs both an up and a down file", v)
		}
		mg.migrations = append(mg.migrations, *m)
	}
	slices.SortFunc(mg.migrations, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range mg.migrations {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrate: versions must run 1, 2, 3... without gaps; found %04d at position %d", m.Version, i+1)
		}
	}
	return mg, nil
}

// Up loads the migrations in dir of fsys and applies the pending ones: [New] then
// [Migrator.Up], for the examples' own schemas.
func Up(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, dir, schema, versionTable string) ([]int, error) {
	mg, err := New(pool, fsys, dir, schema, versionTable)
	if err != nil {
		return nil, err
	}
	return mg.Up(ctx)
}

// Latest returns the highest version known to the migrator.
func (mg *Migrator) Latest() int { return len(mg.migrations) }

func (mg *Migrator) table() string { return sqlident.Quote(mg.schema, mg.versionTable) }

// lockKey names the advisory lock that serialises the migrators of the schema and table.
func (mg *Migrator) lockKey() string {
	return "sqsinbox.migrate." + mg.schema + "." + mg.versionTable
}

// inLock runs fn in a transaction that first takes the migrator's advisory lock, waiting for it.
// The lock is transaction-scoped: it ends with the transaction, on whichever server connection
// a pooler (PgBouncer in transaction mode, RDS Proxy) gave it, where a session lock's unlock would
// run on another connection and leave the lock held.
func (mg *Migrator) inLock(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, mg.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", mg.lockKey()); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		return fn(tx)
	})
}

func (mg *Migrator) ensureTable(ctx context.Context) error {
	err := mg.inLock(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+sqlident.Quote(mg.schema)+";\n"+
			"CREATE TABLE IF NOT EXISTS "+mg.table()+
			" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
		return err
	})
	if err != nil {
		return fmt.Errorf("migrate: create version table %s: %w", mg.table(), err)
	}
	return nil
}

// Current returns the highest applied version, 0 when none (or when the version table does not
// exist yet). It creates nothing.
func (mg *Migrator) Current(ctx context.Context) (int, error) {
	var exists bool
	if err := mg.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", mg.table()).Scan(&exists); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := mg.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+mg.table()).Scan(&v); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	return v, nil
}

// begin makes sure the version table exists and reads the applied versions: what Up and Down
// both start with. Each migration's transaction reads its version again under the lock
// ([Migrator.step]): another migrator may have run it since.
func (mg *Migrator) begin(ctx context.Context) (map[int]time.Time, error) {
	if err := mg.ensureTable(ctx); err != nil {
		return nil, err
	}
	conn, err := mg.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	return mg.applied(ctx, conn)
}

// step applies (up) or reverts m in one transaction that holds the migrator's lock, unless the
// version table, read under the lock, says another migrator already did. did reports whether
// this one did.
func (mg *Migrator) step(ctx context.Context, m Migration, up bool) (did bool, err error) {
	err = mg.inLock(ctx, func(tx pgx.Tx) error {
		var applied bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+mg.table()+" WHERE version = $1)", m.Version).Scan(&applied); err != nil {
			return err
		}
		if applied == up {
			return nil
		}
		sql, record := m.Up, "INSERT INTO "+mg.table()+" (version, name) VALUES ($1, $2)"
		args := []any{m.Version, m.Name}
		if !up {
			sql, record, args = m.Down, "DELETE FROM "+mg.table()+" WHERE version = $1", args[:1]
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, record, args...)
		did = err == nil
		return err
	})
	return did, err
}

// Up applies every pending migration, in order, and returns the versions it applied. Migrators
// of the same schema and table running at once apply each migration once, in order.
func (mg *Migrator) Up(ctx context.Context) ([]int, error) {
	applied, err := mg.begin(ctx)
	if err != nil {
		return nil, err
	}
	var done []int
	for _, m := range mg.migrations {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		did, err := mg.step(ctx, m, true)
		if err != nil {
			return done, fmt.Errorf("migrate: up %04d_%s: %w", m.Version, m.Name, err)
		}
		if did {
			done = append(done, m.Version)
		}
	}
	return done, nil
}

// ErrNoSteps is returned by Down for a count under 1. Reverting every migration is DownAll: a
// count of 0 from an unset field must not drop every table.
var ErrNoSteps = errors.New("migrate: down needs at least 1 step")

// Down reverts the last steps applied migrations, newest first, and returns the versions it
// reverted. steps must be at least 1 ([ErrNoSteps]).
func (mg *Migrator) Down(ctx context.Context, steps int) ([]int, error) {
	if steps < 1 {
		return nil, fmt.Errorf("%w (got %d)", ErrNoSteps, steps)
	}
	return mg.down(ctx, steps)
}

// DownAll reverts every applied migration, newest first, and returns the versions it reverted.
func (mg *Migrator) DownAll(ctx context.Context) ([]int, error) { return mg.down(ctx, 0) }

// down reverts the last steps applied migrations, or all of them when steps is 0.
func (mg *Migrator) down(ctx context.Context, steps int) ([]int, error) {
	applied, err := mg.begin(ctx)
	if err != nil {
		return nil, err
	}
	var done []int
	for i := len(mg.migrations) - 1; i >= 0; i-- {
		if steps > 0 && len(done) == steps {
			break
		}
		m := mg.migrations[i]
		if _, ok := applied[m.Version]; !ok {
			continue
		}
		did, err := mg.step(ctx, m, false)
		if err != nil {
			return done, fmt.Errorf("migrate: down %04d_%s: %w", m.Version, m.Name, err)
		}
		if did {
			done = append(done, m.Version)
		}
	}
	return done, nil
}

// Status lists every known migration with the time it was applied.
func (mg *Migrator) Status(ctx context.Context) ([]Status, error) {
	cur, err := mg.Current(ctx)
	if err != nil {
		return nil, err
	}
	applied := map[int]time.Time{}
	if cur > 0 {
		conn, err := mg.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate: connect: %w", err)
		}
		defer conn.Release()
		if applied, err = mg.applied(ctx, conn); err != nil {
			return nil, err
		}
	}
	out := make([]Status, len(mg.migrations))
	for i, m := range mg.migrations {
		out[i] = Status{Migration: m, AppliedAt: applied[m.Version]}
	}
	return out, nil
}

func (mg *Migrator) applied(ctx context.Context, conn *pgxpool.Conn) (map[int]time.Time, error) {
	rows, err := conn.Query(ctx, "SELECT version, applied_at FROM "+mg.table())
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", mg.table(), err)
	}
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		out[v] = at
	}
	return out, rows.Err()
}

// ErrBehind is wrapped by CheckCurrent when the schema lacks migrations.
var ErrBehind = errors.New("schema is not migrated")

// CheckCurrent fails unless every known migration is applied.
func (mg *Migrator) CheckCurrent(ctx context.Context) error {
	cur, err := mg.Current(ctx)
	if err != nil {
		return err
	}
	if cur < mg.Latest() {
		return fmt.Errorf("%w: schema %q is at version %d of %d; run `sqsinbox migrate up`", ErrBehind, mg.schema, cur, mg.Latest())
	}
	return nil
}

// Package migrate applies numbered, embedded up and down SQL migrations to a schema. The inbox's
// own migrations run through it (inbox.Migrate and `sqsinbox migrate` wrap it), and it is public
// so that a service built on sqsinbox can ship its own tables the same way, as the examples do,
// or run the inbox's migrations from its own deployment tool.
//
// Files are named NNNN_name.up.sql and NNNN_name.down.sql. The text {{schema}} in a file is
// replaced by the quoted schema name. Applied versions are recorded in a table of the schema.
// Each migration runs in its own transaction, and a session advisory lock keeps two migrators
// of the same schema and table from running at once.
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

// lock takes a dedicated connection holding the migrator's advisory lock.
func (mg *Migrator) lock(ctx context.Context) (*pgxpool.Conn, func(), error) {
	conn, err := mg.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: connect: %w", err)
	}
	key := "sqsinbox.migrate." + mg.schema + "." + mg.versionTable
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", key); err != nil {
		conn.Release()
		return nil, nil, fmt.Errorf("migrate: lock: %w", err)
	}
	release := func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
		conn.Release()
	}
	return conn, release, nil
}

func (mg *Migrator) ensureTable(ctx context.Context, conn *pgxpool.Conn) error {
	_, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+sqlident.Quote(mg.schema)+";\n"+
		"CREATE TABLE IF NOT EXISTS "+mg.table()+
		" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
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

// begin takes the migrator's lock, makes sure the version table exists and reads the applied
// versions: what Up and Down both start with. The caller must call release.
func (mg *Migrator) begin(ctx context.Context) (*pgxpool.Conn, func(), map[int]time.Time, error) {
	conn, release, err := mg.lock(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := mg.ensureTable(ctx, conn); err != nil {
		release()
		return nil, nil, nil, err
	}
	applied, err := mg.applied(ctx, conn)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return conn, release, applied, nil
}

// Up applies every pending migration, in order, and returns the versions it applied.
func (mg *Migrator) Up(ctx context.Context) ([]int, error) {
	conn, release, applied, err := mg.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var done []int
	for _, m := range mg.migrations {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+mg.table()+" (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate: up %04d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m.Version)
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
	conn, release, applied, err := mg.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var done []int
	for i := len(mg.migrations) - 1; i >= 0; i-- {
		if steps > 0 && len(done) == steps {
			break
		}
		m := mg.migrations[i]
		if _, ok := applied[m.Version]; !ok {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+mg.table()+" WHERE version = $1", m.Version)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate: down %04d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m.Version)
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

package workerapp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
)

// ErrNoDatabase is returned when nothing says where the database is. Without DATABASE_URL or a
// libpq variable that names the server, the database or a service, the driver would connect
// quietly to the default database on the local socket, and the worker would fail later with a
// misleading error (an empty schema, a missing table).
var ErrNoDatabase = errors.New("no database configured: set DATABASE_URL (postgres://user:password@host:5432/dbname) " +
	"or the libpq variables PGHOST and PGDATABASE (or PGSERVICE); without them the driver would connect to " +
	"the default database on the local socket")

// whereVars are the libpq variables that say where the database is. The others (PGPORT, PGUSER,
// PGPASSWORD, PGSSLMODE, ...) are read by the driver too, but do not choose a database.
var whereVars = []string{"PGHOST", "PGDATABASE", "PGSERVICE"}

// connectTimeout bounds the connection check at start.
const connectTimeout = 30 * time.Second

// ConnString returns the connection string to give the driver: DATABASE_URL, or "" when only
// the libpq variables say where the database is (the driver reads them, and the rest of the PG*
// variables, from the process's environment). It returns [ErrNoDatabase] when neither does.
func ConnString(getenv func(string) string) (string, error) {
	if u := getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	for _, k := range whereVars {
		if getenv(k) != "" {
			return "", nil
		}
	}
	return "", ErrNoDatabase
}

// Connect opens a pool on the database that getenv's DATABASE_URL or PG* variables name (see
// [ConnString]), with maxConns connections at most unless the connection string sets
// pool_max_conns (0 keeps the driver's default), and checks that the server accepts a
// connection. A refusal by the server (a wrong password, an unknown role, a missing database)
// is reported with what PostgreSQL said and its SQLSTATE; a server that does not answer is
// reported as unreachable. Either error names the server, database and user. Behind a
// transaction pooler (PgBouncer in transaction mode, RDS Proxy), when the connection string sets
// no default_query_exec_mode, the pool uses cache_describe instead of pgx's default, which fails
// there (see poolerSafe).
func Connect(ctx context.Context, getenv func(string) string, maxConns int32) (*pgxpool.Pool, error) {
	conn, err := ConnString(getenv)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		if conn == "" {
			return nil, fmt.Errorf("the PG* variables: %w", err)
		}
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if maxConns > 0 && !strings.Contains(conn, "pool_max_conns") {
		pcfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", where(pcfg), err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, connectError(pcfg, err)
	}
	return poolerSafe(pctx, pool, pcfg, conn)
}

// poolerSafe returns pool, or, when the connection string sets no query mode and the pool
// reaches PostgreSQL through a transaction pooler (PgBouncer in transaction mode, RDS Proxy),
// a pool like it in query mode cache_describe: pgx's default, cache_statement, fails there
// (prepared statements used on another server connection). On a direct connection the default
// stays, which is the fastest. A mode set in the URL is kept; the inbox's start-up check
// refuses one that fails behind the pooler, naming the fix.
func poolerSafe(ctx context.Context, pool *pgxpool.Pool, pcfg *pgxpool.Config, conn string) (*pgxpool.Pool, error) {
	if strings.Contains(conn, "default_query_exec_mode") || pooler.ModeSafe(pcfg.ConnConfig.DefaultQueryExecMode) {
		return pool, nil
	}
	behind, err := pooler.Detect(ctx, pcfg.ConnConfig)
	if err != nil {
		pool.Close()
		return nil, connectError(pcfg, err)
	}
	if !behind {
		return pool, nil
	}
	pool.Close()
	pcfg.ConnConfig.DefaultQueryExecMode = pooler.SafeMode
	safe, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", where(pcfg), err)
	}
	return safe, nil
}

// where names the server, database and user of pcfg.
func where(pcfg *pgxpool.Config) string {
	cc := pcfg.ConnConfig
	return fmt.Sprintf("%q on %s:%d as user %q", cc.Database, cc.Host, cc.Port, cc.User)
}

// dbError is a failed connection check: its text is written for the operator, and it wraps
// the driver's error (a *pgconn.PgError when the server refused).
type dbError struct {
	msg string
	err error
}

func (e *dbError) Error() string { return e.msg }
func (e *dbError) Unwrap() error { return e.err }

func connectError(pcfg *pgxpool.Config, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &dbError{err: err, msg: fmt.Sprintf("database %s: PostgreSQL refused the connection: %s (SQLSTATE %s)",
			where(pcfg), pgErr.Message, pgErr.Code)}
	}
	return &dbError{err: err, msg: fmt.Sprintf("database %s unreachable: %v", where(pcfg), err)}
}

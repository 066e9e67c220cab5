package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// env is the server the benchmark runs on: a throwaway cluster of its own (restartable, with
// pg_stat_statements), or the one named by -pg.
type env struct {
	url  string
	srv  *pgtest.Server // nil with -pg
	pool *pgxpool.Pool
	pss  bool // pg_stat_statements is usable
}

// ownConf is appended to the throwaway cluster's postgresql.conf.
func ownConf(sharedBuffers string) string {
	return fmt.Sprintf(`
shared_buffers = %s
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = top
wal_level = minimal
max_wal_senders = 0
max_wal_size = 8GB
checkpoint_timeout = 15min
maintenance_work_mem = 1GB
max_parallel_maintenance_workers = 1
track_io_timing = on
pg_stat_statements.track_planning = on
`, sharedBuffers)
}

func openEnv(ctx context.Context, pgURL, sharedBuffers string) (*env, error) {
	e := &env{url: pgURL}
	if pgURL == "" {
		srv, err := pgtest.StartOwned(ctx, "inboxlayout")
		if err != nil {
			return nil, err
		}
		e.srv = srv
		e.url = srv.URL
		f, err := os.OpenFile(filepath.Join(srv.Dir(), "data", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(ownConf(sharedBuffers))
			_ = f.Close()
		}
		if err == nil {
			err = srv.Restart("fast")
		}
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("configure the throwaway cluster: %w", err)
		}
		log.Printf("throwaway cluster in %s (shared_buffers %s, wal_level minimal, pg_stat_statements)", srv.Dir(), sharedBuffers)
	}
	if err := e.connect(ctx); err != nil {
		e.close()
		return nil, err
	}
	if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
		_, err = e.pool.Exec(ctx, "SELECT pg_stat_statements_reset()")
		e.pss = err == nil
	}
	if !e.pss {
		log.Printf("pg_stat_statements is not usable: buffers per claim come from EXPLAIN (ANALYZE, BUFFERS) only")
	}
	return e, nil
}

func (e *env) connect(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 24
	e.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return e.pool.Ping(ctx)
}

func (e *env) close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.srv != nil {
		e.srv.Close()
	}
}

// cold restarts the throwaway cluster and drops the OS page cache. It says what it could do.
func (e *env) cold(ctx context.Context) (string, error) {
	if e.srv == nil {
		return "not cold: -pg server is never restarted", nil
	}
	e.pool.Close()
	_, _ = e.pool, ctx
	if err := e.srv.Restart("fast"); err != nil {
		return "", err
	}
	what := "restarted"
	if err := dropCaches(); err != nil {
		what += ", OS cache NOT dropped (" + err.Error() + ")"
	} else {
		what += ", OS cache dropped"
	}
	if err := e.connect(ctx); err != nil {
		return "", err
	}
	return what, nil
}

func dropCaches() error {
	// sync first so the dirty pages can be dropped.
	if err := runCmd("sync"); err != nil {
		return err
	}
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

func now() time.Time { return time.Now() }

func since(t time.Time) float64 { return time.Since(t).Seconds() }

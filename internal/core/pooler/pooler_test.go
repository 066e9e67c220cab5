package pooler_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
)

var db *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, "pooler", &db) }

func connConfig(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDetect tells, a few times each, a direct connection (PostgreSQL) and PgBouncer in session
// mode (no pooling of transactions) from PgBouncer in transaction mode, alone and with other
// clients' short statements on it.
func TestDetect(t *testing.T) {
	tx, err := pgbouncer.Start(t.Context(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close)
	session, err := pgbouncer.Start(t.Context(), db, &pgbouncer.Config{PoolMode: "session"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.Close)
	for _, tc := range []struct {
		name, url string
		traffic   *pgbouncer.Bouncer
		want      bool
	}{
		{"direct", db.URL, nil, false},
		{"session pooler", session.URL, session, false},
		{"transaction pooler alone", tx.URL, nil, true},
		{"transaction pooler with traffic", tx.URL, tx, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.traffic != nil {
				tr, err := tc.traffic.StartTraffic(t.Context(), 4)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := tr.Stop(); err != nil {
						t.Error(err)
					}
				}()
			}
			for i := range 5 {
				got, err := pooler.Detect(t.Context(), connConfig(t, tc.url))
				if err != nil || got != tc.want {
					t.Fatalf("try %d: Detect = %v, %v; want %v", i, got, err, tc.want)
				}
			}
		})
	}
}

// TestCheck (PostgreSQL, PgBouncer in transaction mode) refuses pgx's default query mode, and
// describe_exec, behind the pooler with an error that names the fix, and accepts the other modes
// there and every mode on a direct connection.
func TestCheck(t *testing.T) {
	b, err := pgbouncer.Start(t.Context(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	for _, path := range []struct{ name, url string }{{"direct", db.URL}, {"pgbouncer", b.URL}} {
		for _, mode := range []string{"", "cache_statement", "describe_exec", "cache_describe", "exec", "simple_protocol"} {
			url := path.url
			if mode != "" {
				url += "&default_query_exec_mode=" + mode
			}
			pool, err := pgxpool.New(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			err = pooler.Check(t.Context(), pool, "inbox")
			pool.Close()
			refuse := path.name == "pgbouncer" && (mode == "" || mode == "cache_statement" || mode == "describe_exec")
			switch {
			case refuse && (!errors.Is(err, pooler.ErrQueryMode) || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe")):
				t.Errorf("%s, mode %q: err = %v; want ErrQueryMode naming default_query_exec_mode=cache_describe", path.name, mode, err)
			case !refuse && err != nil:
				t.Errorf("%s, mode %q: err = %v; want nil", path.name, mode, err)
			}
		}
	}
}

package workerapp_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// TestConnectPicksQueryMode (PostgreSQL, PgBouncer in transaction mode): Connect keeps pgx's
// default query mode on a direct connection, switches to cache_describe behind the pooler when
// DATABASE_URL sets no mode, and keeps a mode the URL sets. The inbox's start-up Check passes
// on the pool Connect made behind the pooler, and refuses a URL that asks for cache_statement
// there, naming the fix.
func TestConnectPicksQueryMode(t *testing.T) {
	t.Parallel()
	b, err := pgbouncer.Start(t.Context(), srv.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	schema := "connect_mode"
	for _, tc := range []struct {
		name, url string
		want      pgx.QueryExecMode
		refused   bool
	}{
		{"direct", srv.DB.URL, pgx.QueryExecModeCacheStatement, false},
		{"pgbouncer", b.URL, pgx.QueryExecModeCacheDescribe, false},
		{"pgbouncer, exec asked", b.URL + "&default_query_exec_mode=exec", pgx.QueryExecModeExec, false},
		{"pgbouncer, cache_statement asked", b.URL + "&default_query_exec_mode=cache_statement", pgx.QueryExecModeCacheStatement, true},
	} {
		pool, err := workerapp.Connect(t.Context(), env(map[string]string{"DATABASE_URL": tc.url}), 4)
		if err != nil {
			t.Fatalf("%s: Connect: %v", tc.name, err)
		}
		if got := pool.Config().ConnConfig.DefaultQueryExecMode; got != tc.want {
			t.Errorf("%s: query mode %v, want %v", tc.name, got, tc.want)
		}
		if tc.name == "direct" {
			if _, err := inbox.Migrate(t.Context(), pool, schema); err != nil {
				t.Fatal(err)
			}
		}
		ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		err = ib.Check(t.Context())
		pool.Close()
		if refused := errors.Is(err, inbox.ErrPoolerQueryMode); refused != tc.refused || (!tc.refused && err != nil) {
			t.Errorf("%s: Check = %v; want refused %v", tc.name, err, tc.refused)
		}
	}
}

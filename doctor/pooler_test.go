package doctor_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/doctor"
	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
)

// TestPooler (PostgreSQL behind Debian's PgBouncer, harness/pgbouncer): a transaction-mode pooler
// with pgx's default query mode (cache_statement) or describe_exec is an error; the same pooler
// with cache_describe, exec or simple_protocol, a session-mode pooler, and a direct connection
// are clean.
func TestPooler(t *testing.T) {
	direct := newPool(t, "")
	schema := migratedSchema(t, direct)
	bouncers := map[string]*pgbouncer.Bouncer{}
	for _, mode := range []string{"transaction", "session"} {
		b, err := pgbouncer.Start(t.Context(), db, &pgbouncer.Config{PoolMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		bouncers[mode] = b
	}
	cases := []struct {
		name, pooler, params string
		want                 bool
	}{
		{name: "transaction mode, cache_statement (pgx's default)", pooler: "transaction", want: true},
		{name: "transaction mode, describe_exec", pooler: "transaction", params: "default_query_exec_mode=describe_exec", want: true},
		{name: "transaction mode, cache_describe", pooler: "transaction", params: "default_query_exec_mode=cache_describe"},
		{name: "transaction mode, exec", pooler: "transaction", params: "default_query_exec_mode=exec"},
		{name: "transaction mode, simple_protocol", pooler: "transaction", params: "default_query_exec_mode=simple_protocol"},
		{name: "session mode, cache_statement", pooler: "session"},
		{name: "direct, cache_statement"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := db.URL
			if tc.pooler != "" {
				u = bouncers[tc.pooler].URL
			}
			if tc.params != "" {
				u += sep(u) + tc.params
			}
			pool, err := pgxpool.New(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			rep := run(t, doctor.Deps{Pool: pool}, cleanConfig("", schema))
			if tc.want {
				if len(rep.Findings) != 1 || rep.Findings[0].Check != "database.pooler" || rep.Findings[0].Severity != doctor.Error {
					t.Fatalf("want exactly one error database.pooler:\n%s", dump(rep))
				}
				return
			}
			if len(rep.Findings) != 0 {
				t.Fatalf("want no finding:\n%s", dump(rep))
			}
		})
	}
}

// sep is what joins one more parameter to the URL u.
func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

package idempotency_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
)

// TestEveryQueryMode (PostgreSQL directly, and behind Debian's PgBouncer in transaction mode
// with other clients' statements on it) runs the middleware in every pgx query mode: a request
// is stored with its allow-listed headers (a jsonb column) and replayed byte for byte with them,
// the handler running once, and the purge runs. In exec and simple_protocol modes the headers,
// sent as bytes, used to reach PostgreSQL as bytea and fail (22P02). cache_statement, pgx's
// default, and describe_exec cannot work behind PgBouncer 1.18 (a prepared statement used in a
// later round trip, which the pooler may send to another server connection), so they run on the
// direct connection only.
func TestEveryQueryMode(t *testing.T) {
	b := pgbouncer.Busy(t, db, nil, 4)
	for _, path := range []struct{ name, url string }{{"direct", db.URL}, {"pgbouncer", b.URL}} {
		for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
			if path.name == "pgbouncer" && (mode == "cache_statement" || mode == "describe_exec") {
				continue
			}
			t.Run(path.name+"/"+mode, func(t *testing.T) {
				pool, err := pgxpool.New(t.Context(), path.url+"&default_query_exec_mode="+mode)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				bb := setupOn(t, pool, nil)
				first := bb.do(t, request{keys: []string{"mode-1"}, body: payBody})
				if first.status != http.StatusCreated || first.replayed() {
					t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
				}
				for range 3 {
					again := bb.do(t, request{keys: []string{"mode-1"}, body: payBody})
					if !again.replayed() || again.status != first.status || !bytes.Equal(again.body, first.body) {
						t.Fatalf("replay: %d replayed=%v %q, want %d %q", again.status, again.replayed(), again.body, first.status, first.body)
					}
					for _, h := range []string{"Content-Type", "Location"} {
						if got, want := again.header.Get(h), first.header.Get(h); got != want || want == "" {
							t.Fatalf("replayed %s = %q, want %q", h, got, want)
						}
					}
				}
				if got := bb.app.calls.Load(); got != 1 {
					t.Fatalf("handler ran %d times, want 1", got)
				}
				if _, err := bb.mw.Purge(t.Context()); err != nil {
					t.Fatalf("Purge: %v", err)
				}
			})
		}
	}
}

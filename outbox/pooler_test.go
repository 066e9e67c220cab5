package outbox_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// queryModes are every pgx QueryExecMode, by the name default_query_exec_mode takes.
var queryModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// pooler starts PgBouncer in transaction mode in front of the test database, with other
// clients' short statements on it, both stopped when t ends.
func pooler(t *testing.T) *pgbouncer.Bouncer { return pgbouncer.Busy(t, db, nil, 4) }

// modePool is a pool on url in query mode, closed when t ends.
func modePool(t *testing.T, url, mode string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url+"&default_query_exec_mode="+mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestOutboxWritesEveryQueryMode writes through the outbox in every pgx query mode, on a direct
// connection (PostgreSQL) and through PgBouncer in transaction mode with other clients' traffic
// (PgBouncer): Add with every kind of attribute, Stats, RetryParked and Purge; and, where the SQS
// server reports batch results (fauxqs; skipped on GoAws), the relay's claims and marks, each
// row reaching the queue with its attributes. cache_statement, pgx's default, and describe_exec
// cannot work behind PgBouncer 1.18 (a prepared statement, named or unnamed, used in a later
// round trip, which the pooler may send to another server connection), so they run on the
// direct connection only.
func TestOutboxWritesEveryQueryMode(t *testing.T) {
	b := pooler(t)
	relay := srv.Lacks(sqstest.SendBatchResults) == ""
	for _, path := range []struct{ name, url string }{{"direct", db.URL}, {"pgbouncer", b.URL}} {
		for _, mode := range queryModes {
			if path.name == "pgbouncer" && (mode == "cache_statement" || mode == "describe_exec") {
				continue
			}
			t.Run(path.name+"/"+mode, func(t *testing.T) {
				ctx := t.Context()
				bb := setup(t, nil) // migrated on a direct connection
				pool := modePool(t, path.url, mode)
				ob, err := outbox.New(pool, &outbox.Config{Schema: bb.schema})
				if err != nil {
					t.Fatal(err)
				}
				if err := ob.Check(ctx); err != nil {
					t.Fatal(err)
				}
				q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-mode"})
				attrs := map[string]outbox.Attribute{"kind": outbox.StringAttribute("OrderPaid"),
					"n": outbox.NumberAttribute("3"), "bin": outbox.BinaryAttribute([]byte{0, 1, 2, '"'})}
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for i := range 3 {
						if _, err := ob.Add(ctx, tx, outbox.Message{Destination: q.URL, Body: fmt.Sprint("body-", i), Attributes: attrs}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("Add in mode %s: %v", mode, err)
				}
				var stored []byte
				if err := bb.pool.QueryRow(ctx, "SELECT attributes FROM "+bb.schema+".outbox_messages LIMIT 1").Scan(&stored); err != nil {
					t.Fatal(err)
				}
				var got map[string]map[string]any
				if err := json.Unmarshal(stored, &got); err != nil || got["kind"]["StringValue"] != "OrderPaid" ||
					got["n"]["DataType"] != "Number" || got["bin"]["BinaryValue"] != "AAECIg==" {
					t.Fatalf("stored attributes %s (%v)", stored, err)
				}
				if s, err := ob.Stats(ctx); err != nil || s.Backlog != 3 {
					t.Fatalf("Stats = %+v, %v; want a backlog of 3", s, err)
				}
				if _, err := ob.RetryParked(ctx); err != nil {
					t.Fatalf("RetryParked: %v", err)
				}
				if _, err := ob.RetryParked(ctx, 1, 2); err != nil {
					t.Fatalf("RetryParked(1, 2): %v", err)
				}
				if _, err := ob.Purge(ctx); err != nil {
					t.Fatalf("Purge: %v", err)
				}
				if !relay {
					return
				}
				rb := &bundle{pool: pool, ob: ob, schema: bb.schema}
				rb.startRelay(t, outbox.RelayConfig{})
				msgs := receive(t, q.URL, 3)
				for _, m := range msgs {
					if a := m.MessageAttributes; a["kind"].StringValue == nil || *a["kind"].StringValue != "OrderPaid" ||
						string(a["bin"].BinaryValue) != "\x00\x01\x02\"" {
						t.Fatalf("received attributes %v", a)
					}
				}
				sqstest.WaitFor(t, waitLong, "3 rows marked sent", func() (bool, string) {
					n := bb.count(t, "SELECT count(*) FROM "+bb.schema+".outbox_messages WHERE sent_at IS NOT NULL")
					return n == 3, fmt.Sprint(n)
				})
			})
		}
	}
}

// TestRelayBehindPooler (PostgreSQL, PgBouncer, an SQS server that reports batch results:
// fauxqs; skipped on GoAws) runs the relay with a PollInterval of an hour, so that only a
// notification (or the fallback) can bring a row out quickly. On a direct connection it hears
// its notifications. Through PgBouncer in transaction mode its LISTEN hears nothing: it must
// notice (Stats().Listening stays false) and poll every DeafPollInterval instead, so each row
// still reaches the queue. The latencies, commit to receive, are logged, not asserted.
func TestRelayBehindPooler(t *testing.T) {
	srv.Need(t, sqstest.SendBatchResults)
	b := pooler(t)
	for _, path := range []struct {
		name, url string
		listening bool
	}{{"direct", db.URL, true}, {"pgbouncer", b.URL, false}} {
		t.Run(path.name, func(t *testing.T) {
			bb := setup(t, nil)
			pool := modePool(t, path.url, "exec")
			ob, err := outbox.New(pool, &outbox.Config{Schema: bb.schema})
			if err != nil {
				t.Fatal(err)
			}
			rb := &bundle{pool: pool, ob: ob, schema: bb.schema}
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-pooler"})
			rl := rb.startRelay(t, outbox.RelayConfig{PollInterval: time.Hour})
			var took []time.Duration
			for i := range 5 {
				start := time.Now()
				rb.add(t, outbox.Message{Destination: q.URL, Body: fmt.Sprint("row-", i)})
				receive(t, q.URL, 1)
				took = append(took, time.Since(start))
				if i == 0 {
					// After the first row the probe's verdict is in (a deaf relay's first row
					// comes from its first fast poll).
					waitStats(t, "the probe's verdict", func() bool {
						return rl.Stats().Listening == path.listening
					}, rl)
				}
			}
			if got := rl.Stats().Listening; got != path.listening {
				t.Fatalf("Stats().Listening = %v, want %v", got, path.listening)
			}
			t.Logf("%s: commit to receive, 5 rows one at a time, poll interval 1 h: %v", path.name, took)
		})
	}
}

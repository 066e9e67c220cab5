package reliability_test

import (
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
)

// TestPoolerChaos runs the warehouse example as 3 processes at the README's defaults behind
// PgBouncer in transaction mode (PostgreSQL, PgBouncer, and the pass's SQS server: GoAws or
// fauxqs), with duplicates, poison messages and SIGKILLs (reliability.PoolerChaos). No worker may
// exit by itself, no order may lose its pick task or get two, and exactly the poison reaches the
// DLQ. Before the query mode was chosen for the pooler, workers exited by the dozen
// (prepared statement "stmtcache_…" already exists).
func TestPoolerChaos(t *testing.T) {
	rep, err := reliability.PoolerChaos(t.Context(), env, reliability.PoolerOptions{Timeout: 3 * time.Minute})
	if rep != nil {
		t.Log(rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.SelfExits != 0 {
		t.Errorf("%d worker processes exited by themselves; the first: %s", rep.SelfExits, rep.SelfExitTails[0])
	}
	if rep.Lost != 0 || rep.Twice != 0 {
		t.Errorf("%d orders lost, %d applied twice", rep.Lost, rep.Twice)
	}
	if rep.DLQ != rep.Poison {
		t.Errorf("%d messages in the DLQ, want the %d poison ones", rep.DLQ, rep.Poison)
	}
	if len(rep.StopErrors) > 0 {
		t.Errorf("workers that did not stop cleanly: %v", rep.StopErrors)
	}
}

package reliability_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
)

// TestFault03PostgresFailover (PostgreSQL: a throwaway cluster of its own, restarted with
// -m immediate and held down 8 s; GoAws or fauxqs; the warehouse example's binary as 3
// processes, SIGKILLed and restarted every 1.5-4 s): no worker process exits by itself (one is
// started during the outage and must wait for the database), every order gets exactly one pick
// task, only the 12 poison events reach the DLQ. The full run (1,500 events, two restarts, 30 s
// down) is `go run ./harness/cmd/soak -run postgres-failover -messages 1500 -workers 3`.
func TestFault03PostgresFailover(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "postgres-failover", reliability.Size{Messages: 300, Workers: 3})
	requirePass(t, rep)
	t.Log(rep.Notes)
}

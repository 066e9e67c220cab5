package reliability_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/internal/reliability"
)

// TestCheckerFlagsAckBeforeCommit is the checker's self-test on real processes: a worker that
// deletes each message before its transaction and is killed between a delete and a commit
// loses messages, and the checker must say so.
func TestCheckerFlagsAckBeforeCommit(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "control-ack-before-commit", small)
	if rep.Lost == 0 {
		t.Errorf("the checker reported no lost message for a worker that acks before commit:\n%s", rep)
	}
	if rep.DeletesUncommitted == 0 {
		t.Errorf("the checker reported no delete without a committed inbox row:\n%s", rep)
	}
}

// TestFault01Sigkill: worker processes SIGKILLed at random points, repeatedly, and restarted.
func TestFault01Sigkill(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "sigkill", reliability.Size{Messages: 300, Workers: 3, Spread: 4 * small.Spread / 3})
	requirePass(t, rep)
}

// TestFault03PostgresRestart: PostgreSQL (the harness's own throwaway cluster) stopped with -m
// immediate and with -m fast mid-run and started again; pollers pause, nothing is lost.
func TestFault03PostgresRestart(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "postgres-restart", small))
}

// TestFault08Poison: poison messages end in the DLQ, good ones are effected once, the worker
// processes never crash.
func TestFault08Poison(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "poison", small))
}

// TestFault09HotKey: 1,000 copies of one key across several workers with small pools: one
// effect, no deadlock.
func TestFault09HotKey(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "hot-key", reliability.Size{Messages: 100, Workers: 3}))
}

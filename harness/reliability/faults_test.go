package reliability_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
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

// TestFault01SigkillSNS: the same with the events published to an SNS topic whose subscription
// delivers them to the queue in envelopes, which the worker unwraps; every message received must
// have been an envelope. Skipped on GoAws, whose envelopes' attributes have SQS's shape.
func TestFault01SigkillSNS(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "sigkill-sns", reliability.Size{Messages: 300, Workers: 3, Spread: 4 * small.Spread / 3})
	requirePass(t, rep)
}

// TestFault01SigkillOffloaded (fauxqs; skipped on GoAws, which has no S3): the same with every
// fifth event's payload (300 KiB) offloaded to S3, the resent events among them; the worker
// processes fetch the payloads before their handlers. Each event is applied once, and each
// offloaded one's effect saw its payload, not the pointer.
func TestFault01SigkillOffloaded(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "sigkill-offloaded", reliability.Size{Messages: 300, Workers: 3, Spread: 4 * small.Spread / 3}))
}

// TestFault01SigkillFIFO: the same on a FIFO queue with several message groups; each group's
// effects commit in the order their events were sent. Skipped on GoAws, whose FIFO is broken.
func TestFault01SigkillFIFO(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "fifo-sigkill", reliability.Size{Messages: 240, Workers: 3, Spread: small.Spread})
	requirePass(t, rep)
	if rep.Groups == 0 {
		t.Errorf("no effect recorded a message group:\n%s", rep)
	}
}

// TestCheckerFlagsFIFOOutOfOrder is the order check's self-test on real processes: workers that
// delete each FIFO message before its transaction let the next message of its group commit
// first, and the checker must say so.
func TestCheckerFlagsFIFOOutOfOrder(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "control-fifo-ack-before-commit", small)
	if rep.Misordered == 0 {
		t.Errorf("the checker reported no effect out of send order for workers that ack before commit on a FIFO queue:\n%s", rep)
	}
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

// TestFault02Sigstop: a worker process SIGSTOPped for longer than the visibility timeout wakes
// up and tries to commit and delete; nothing runs twice.
func TestFault02Sigstop(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "sigstop", small))
}

// TestFault04CommitCut: the connection to PostgreSQL cut during COMMIT (before and after the
// server got it); an unknown outcome never leads to a delete until a claim of the same delivery
// (run again after the pause it began) or its redelivery settles it.
func TestFault04CommitCut(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "commit-cut", small))
}

// TestFault05SQSOutage: throttling and 5xx from the SQS side, then the server unreachable; no
// hot loop, nothing lost.
func TestFault05SQSOutage(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "sqs-outage-throttle", small))
}

// TestFault06DeleteFails: deletes that keep failing after commit until the message reaches the
// DLQ; the redrive gives no second effect.
func TestFault06DeleteFails(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "delete-fails-dlq-redrive", reliability.Size{Messages: 200, Workers: 2}))
}

// TestFault07VisibilityExpires: a handler outlives its visibility timeout with heartbeats
// blocked; the second consumer waits on the inbox row and ends as a duplicate.
func TestFault07VisibilityExpires(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "visibility-expires", small))
}

// TestFault08PoisonBadUTF8 (the in-process fake: keys that are not valid UTF-8, which SQS's JSON
// protocol cannot carry, so no server can deliver them).
func TestFault08PoisonBadUTF8(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "poison-bad-utf8-fake", small))
}

// TestFault10Sigterm: SIGTERM under load, and with the grace period exceeded.
func TestFault10Sigterm(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "sigterm", small))
}

// TestFault02FrozenClaimHolder: a worker process SIGSTOPped while it holds inbox claims, for
// longer than maxReceiveCount × the visibility timeout. The server ends its sessions
// (IdleInTransactionTimeout), the other process's blocked claims retry after that, and each
// event is applied once; none reaches the DLQ.
func TestFault02FrozenClaimHolder(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "frozen-claim-holder", frozenSize)
	requirePass(t, rep)
	if rep.GoodInDLQ != 0 {
		t.Errorf("%d good messages reached the DLQ:\n%s", rep.GoodInDLQ, rep)
	}
}

// TestFault02FrozenClaimHolderControl is the same run with the inbox's timeouts effectively off,
// as before they existed: the frozen session keeps its claims, the other process's claims wait
// until the handler's timeout, and the held events burn their receives into the DLQ. The
// scenario must fail, and for that reason.
func TestFault02FrozenClaimHolderControl(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "control-frozen-no-timeouts", frozenSize)
	if len(rep.Problems()) == 0 {
		t.Errorf("the control run without the inbox's timeouts passed:\n%s", rep)
	}
	if rep.GoodInDLQ == 0 {
		t.Errorf("no good message reached the DLQ without the inbox's timeouts:\n%s", rep)
	}
}

// frozenSize is the size of the frozen-claim-holder runs: a few dozen events are enough, as the
// fault is about the handful the stopped process holds.
var frozenSize = reliability.Size{Messages: 40, Workers: 2}

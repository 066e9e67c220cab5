package reliability_test

import (
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
)

// The faults only batched inbox commits have (issue 14).

// TestFault01BatchSigkill: worker processes SIGKILLed while each holds an open batch of several
// messages: the batch's transaction is aborted, nothing of it deleted, all of it redelivered and
// applied once.
func TestFault01BatchSigkill(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "batch-sigkill", reliability.Size{Messages: 120, Workers: 2}))
}

// TestCheckerFlagsBatchAckBeforeCommit is the batch-sigkill checks' self-test: a batch handler
// that deletes its messages before the batch's transaction, killed while the batch is open,
// loses them, and the checks must say so.
func TestCheckerFlagsBatchAckBeforeCommit(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "control-batch-sigkill-ack-before-commit", small)
	if rep.Lost == 0 {
		t.Errorf("the checker reported no lost message for a batch handler that acks before commit:\n%s", rep)
	}
	if !hasCheck(rep, "had been deleted by the killed process") {
		t.Errorf("the scenario did not report the killed batch's messages deleted:\n%s", rep)
	}
}

// TestFault04BatchCommitCut: COMMITs of batches of several messages cut on the wire; no message
// of a cut batch is deleted on that delivery, and each event is applied once.
func TestFault04BatchCommitCut(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "batch-commit-cut", reliability.Size{Messages: 200, Workers: 2}))
}

// TestFault08BatchPoison: a poison message inside a batch fails alone: the batch's good messages
// commit and are deleted, the poison reaches the DLQ with its message id and has no effect.
func TestFault08BatchPoison(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "batch-poison", reliability.Size{Messages: 90, Workers: 1}))
}

// TestFault09BatchHotKey: one event id sent hundreds of times at once into batches of several
// workers: one effect, no batch retried.
func TestFault09BatchHotKey(t *testing.T) {
	t.Parallel()
	requirePass(t, runScenario(t, "batch-hot-key", reliability.Size{Messages: 400, Workers: 3}))
}

// TestFault11BatchMisbehavingHandlers: handlers that misbehave with their transaction, chosen by
// key (reliability.MisbehaviourOf), in batches: the events whose handler swallows a failed
// statement, leaves rows open or overruns its timeout inside a statement end in the DLQ unapplied,
// every other event (one that calls Commit included) is applied once, and no worker pauses. 600
// events hold 16, 5, 8 and 8 of the four misbehaving classes.
func TestFault11BatchMisbehavingHandlers(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "batch-misbehaving-handlers", reliability.Size{Messages: 600, Workers: 2})
	requirePass(t, rep)
	// One message per event when every send was ok: the DLQ holds exactly the failing events.
	if rep.ExpectedDLQ == 0 || (rep.SentOK == rep.Messages && rep.GoodInDLQ != rep.ExpectedDLQ) {
		t.Errorf("%d events expected in the DLQ, %d messages there:\n%s", rep.ExpectedDLQ, rep.GoodInDLQ, rep)
	}
}

func hasCheck(rep *reliability.Report, s string) bool {
	for _, c := range rep.Checks {
		if strings.Contains(c, s) {
			return true
		}
	}
	return false
}

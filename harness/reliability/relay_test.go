package reliability_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
)

// TestFault01RelaySigkill: producers write events through outbox.Add in transactions beside a
// business row, a fifth of them rolled back on purpose and every tenth committed one added again
// (refused as a duplicate); outbox relay processes are SIGKILLed at random and some kill
// themselves right after a publish, before they mark its rows sent; two consumers apply the
// events through the inbox. Every committed event reaches the queue, its copies carry its event
// id, it is applied once, and no rolled-back event has any effect. Runs on fauxqs (and any
// server whose SendMessageBatch answers list the stored entries); skipped on GoAws.
func TestFault01RelaySigkill(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "relay-sigkill", reliability.Size{Messages: 200, Workers: 2, Spread: small.Spread})
	requirePass(t, rep)
}

// TestCheckerFlagsRelayStampBeforePublish is the relay checks' self-test on real processes: a
// relay that marks rows sent before it publishes them and is killed in between loses their
// events, and the checker must say so. Runs on fauxqs; skipped on GoAws, as above.
func TestCheckerFlagsRelayStampBeforePublish(t *testing.T) {
	t.Parallel()
	rep := runScenario(t, "control-relay-stamp-before-publish", small)
	if rep.Lost == 0 {
		t.Errorf("the checker reported no lost event for a relay that marks rows sent before publishing:\n%s", rep)
	}
}

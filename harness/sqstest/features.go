package sqstest

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

// Feature is a piece of SQS behaviour that a test relies on and that some servers lack. A test
// declares what it needs with [Server.Need] (or, for the worker's suite, with its own server
// type, which also covers the in-process fake); where the server lacks a feature the test skips
// and says why, so the same test runs everywhere it can and the reason shows where it cannot.
type Feature string

// The features tests declare. TESTING.md lists each server's quirks behind them.
const (
	// ReceiveCount is ApproximateReceiveCount counting each delivery (1, 2, 3, ...).
	ReceiveCount Feature = "receive counts"
	// FIFO is FIFO queues that keep order within a group, lock a group while one of its messages
	// is in flight, and deduplicate by MessageDeduplicationId.
	FIFO Feature = "FIFO queues"
	// ContentDedup is content-based deduplication on FIFO queues.
	ContentDedup Feature = "content-based deduplication"
	// GroupBatch is a FIFO receive that returns several messages of one group, in order, as SQS
	// does (up to ten).
	GroupBatch Feature = "several messages of one FIFO group in one receive"
	// RedriveAllowPolicy is a DLQ's RedriveAllowPolicy attribute.
	RedriveAllowPolicy Feature = "RedriveAllowPolicy"
	// VisibilityBatch is ChangeMessageVisibilityBatch, and DelaySeconds honoured.
	VisibilityBatch Feature = "ChangeMessageVisibilityBatch and DelaySeconds"
	// SendBatchResults is SendMessageBatch answering which entries it stored and which failed.
	SendBatchResults Feature = "SendMessageBatch results"
	// Faults is faults on command: throttling, a partial batch failure, a stale receipt handle, a
	// refused delete. Only the in-process fake (worker/sqsfake) has it.
	Faults Feature = "injected faults"
	// Wire is a server across HTTP: the SDK's transport, retries, timeouts and request bodies.
	// The in-process fake lacks it.
	Wire Feature = "an SQS server over HTTP"
	// FairGroups is MessageGroupId kept on a standard queue and returned on receive, as SQS does
	// for fair queues.
	FairGroups Feature = "MessageGroupId returned on a standard queue (fair queues)"
	// S3 is S3 on the server's endpoint (or AWS_ENDPOINT_URL_S3's), for offloaded payloads.
	S3 Feature = "S3"
)

// noFaults is why a real server lacks [Faults].
const noFaults = "a real server cannot be told to throttle, fail part of a batch or forget a receipt handle; the fake can"

// lacking says, per server kind, which features it lacks and why.
var lacking = map[Kind]map[Feature]string{
	KindGoAws: {
		ReceiveCount:       "GoAws reports ApproximateReceiveCount 1 on every delivery",
		FIFO:               "GoAws's FIFO queues are unreliable (order across groups, group locks)",
		ContentDedup:       "GoAws ignores content-based deduplication and answers a deduplicated send with a new MessageId",
		GroupBatch:         "GoAws's FIFO queues are unreliable (order across groups, group locks)",
		RedriveAllowPolicy: "GoAws refuses RedriveAllowPolicy with InvalidParameterValue",
		VisibilityBatch:    "GoAws lacks ChangeMessageVisibilityBatch and ignores DelaySeconds",
		SendBatchResults:   "GoAws answers SendMessageBatch with empty Successful and Failed lists",
		Faults:             noFaults,
		S3:                 "GoAws serves SQS and SNS only; it has no S3",
		FairGroups:         "GoAws returns no MessageGroupId on a standard queue",
	},
	KindFauxqs: {
		GroupBatch: "fauxqs returns at most one message per group in a receive",
		Faults:     noFaults,
		FairGroups: "fauxqs drops MessageGroupId on a standard queue",
	},
	KindOther: {Faults: noFaults},
}

// Lacks says why s lacks f, or "" when it has it.
func (s *Server) Lacks(f Feature) string { return LacksFeature(s.Kind, f) }

// LacksFeature is [Server.Lacks] for a server of kind k.
func LacksFeature(k Kind, f Feature) string { return lacking[k][f] }

// Need skips t, saying why, unless s has every feature in fs.
func (s *Server) Need(t testing.TB, fs ...Feature) {
	t.Helper()
	if msg := NeedMessage(string(s.Kind), s.Lacks, fs); msg != "" {
		t.Skip(msg)
	}
}

// NeedMessage is the skip message for a server named name lacking one of fs (lacks says why it
// lacks one), or "" when it lacks none.
func NeedMessage(name string, lacks func(Feature) string, fs []Feature) string {
	for _, f := range fs {
		if why := lacks(f); why != "" {
			return fmt.Sprintf("needs %s, which %s lacks: %s", f, name, why)
		}
	}
	return ""
}

// FindLeaks is goleak.Find for a test binary that used an SQS server: it ignores, besides opts,
// what outlives a test by design (the SDK's idle keep-alive connections, the harness's wait for
// GoAws to exit).
func FindLeaks(opts ...goleak.Option) error {
	return goleak.Find(append([]goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/sqsinbox/sqsinbox/harness/sqstest.tryGoAws.func1"),
	}, opts...)...)
}

package worker

import "time"

// Counter names one of the worker's counters.
type Counter string

// The worker's counters.
const (
	// Received counts messages received.
	Received Counter = "received"
	// Processed counts messages whose handler returned nil.
	Processed Counter = "processed"
	// Duplicates counts messages whose handler returned [ErrDuplicate].
	Duplicates Counter = "duplicates"
	// Failed counts handler errors, panics and timeouts (not [RetryAfter] or [Discard]).
	Failed Counter = "failed"
	// Retried counts messages handed back for a later delivery (failures, [RetryAfter] and
	// [RetryBlocked]).
	Retried Counter = "retried"
	// Blocked counts messages handed back because another consumer held their work
	// ([RetryBlocked]; for the inbox, an uncommitted claim of the same event).
	Blocked Counter = "blocked"
	// Discarded counts messages whose handler returned [Discard].
	Discarded Counter = "discarded"
	// Released counts messages made visible again without being run (at stop, or behind a failed
	// message of the same FIFO group).
	Released Counter = "released"
	// Deleted counts messages deleted from the queue.
	Deleted Counter = "deleted"
	// DeleteFailures counts deletes that failed for good (the message will be delivered again).
	DeleteFailures Counter = "delete_failures"
	// LeasesLost counts messages whose lease was lost (their receipt handle gone, or SQS's
	// 12-hour cap reached) while they ran or waited for their turn.
	LeasesLost Counter = "leases_lost"
	// Heartbeats counts visibility extensions of running handlers.
	Heartbeats Counter = "heartbeats"
	// ReceiveErrors counts failed ReceiveMessage calls.
	ReceiveErrors Counter = "receive_errors"
	// Batches counts calls of [BatchHandler.HandleBatch].
	Batches Counter = "batches"
	// BatchedMessages counts the messages of those calls: BatchedMessages / Batches is the mean
	// batch size.
	BatchedMessages Counter = "batched_messages"
	// RolledBack counts messages of a batch whose work failed and was rolled back alone (for the
	// inbox, to the message's savepoint) while the rest of the batch went on.
	RolledBack Counter = "rolled_back"
	// BatchRetries counts batches rolled back as a whole and run again (for the inbox: a deadlock,
	// a serialization failure, or a message's context ending during a statement).
	BatchRetries Counter = "batch_retries"
	// BrokenDeployments counts messages handed back because the deployment is broken
	// ([BrokenDeployment]; for the inbox, a missing table, column, function or grant): they pause
	// the worker and are not counted as failed.
	BrokenDeployments Counter = "broken_deployments"
	// PayloadsFetched counts offloaded payloads fetched (Config.Payloads) before their handler.
	PayloadsFetched Counter = "payloads_fetched"
	// SQSRequests counts every SQS API call the worker made: what SQS bills (per request, and
	// per 64 KiB of a request's payload). A call the SDK retries is counted once; each retry is
	// one more request to SQS. SQSRequests / Received is the requests a message costs.
	SQSRequests Counter = "sqs_requests"
	// ReceiveRequests counts ReceiveMessage calls (failed ones included).
	ReceiveRequests Counter = "receive_requests"
	// EmptyReceives counts the ReceiveMessage calls that returned no message (an idle long poll).
	EmptyReceives Counter = "empty_receives"
	// DeleteRequests counts DeleteMessageBatch (and DeleteMessage) calls.
	DeleteRequests Counter = "delete_requests"
	// VisibilityRequests counts ChangeMessageVisibility and ChangeMessageVisibilityBatch calls:
	// heartbeats, retries' delays and releases.
	VisibilityRequests Counter = "visibility_requests"
)

// Counters lists every [Counter], for adapters that register them up front.
var Counters = []Counter{Received, Processed, Duplicates, Failed, Retried, Blocked, Discarded, Released,
	Deleted, DeleteFailures, LeasesLost, Heartbeats, ReceiveErrors, Batches, BatchedMessages, RolledBack, BatchRetries, BrokenDeployments, PayloadsFetched,
	SQSRequests, ReceiveRequests, EmptyReceives, DeleteRequests, VisibilityRequests}

// Histogram names one of the worker's histograms of durations.
type Histogram string

// The worker's histograms.
const (
	// HandlerDuration observes how long each handler call took.
	HandlerDuration Histogram = "handler_duration"
	// CommitToDelete observes the time from a handler's success to the delete's confirmation.
	CommitToDelete Histogram = "commit_to_delete"
	// HeldWait observes how long each message waited, from the return of the receive that
	// brought it (a long poll's wait is not counted), before its handler started (prefetched messages wait for a free handler; a batch's for the messages before
	// them).
	HeldWait Histogram = "held_wait"
	// PayloadFetchDuration observes each fetch of offloaded payloads (Config.Payloads): one per
	// handler call whose messages include one.
	PayloadFetchDuration Histogram = "payload_fetch_duration"
)

// Histograms lists every [Histogram].
var Histograms = []Histogram{HandlerDuration, CommitToDelete, HeldWait, PayloadFetchDuration}

// Metrics receives the worker's measurements. Implementations must be safe for concurrent use and
// fast: they are called on every message. See the workerprom package for Prometheus.
type Metrics interface {
	// Add adds n to counter c.
	Add(c Counter, n int)
	// Observe records one duration in histogram h.
	Observe(h Histogram, d time.Duration)
	// SetInFlight reports the number of handlers running now.
	SetInFlight(n int)
}

type nopMetrics struct{}

func (nopMetrics) Add(Counter, int)                 {}
func (nopMetrics) Observe(Histogram, time.Duration) {}
func (nopMetrics) SetInFlight(int)                  {}

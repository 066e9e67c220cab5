// Package reliability is the harness that proves sqsinbox's invariant under faults: every message
// sent is, in the end, effected exactly once or sitting in the dead-letter queue by policy, and
// no message is deleted before its inbox row has committed.
//
// # Pieces
//
//   - A [Producer] sends events with unique values and stable keys (and, on purpose, copies of
//     some keys, as a retrying producer does) and records each send as ok, failed or unknown.
//   - The recording handler ([StartWorker]) writes, in its inbox transaction, one effect row
//     (key, value, worker, attempt, committed_at, and the SHA-256 of the body it saw) and a
//     stacking business write. With WorkerConfig.Misbehave it also misbehaves with the
//     transaction of some events, chosen by key ([MisbehaviourOf], the one rule the checker
//     reads too): it swallows a failed statement, leaves rows open, overruns its timeout inside
//     a statement, or calls Commit. With WorkerConfig.PayloadBuckets the worker fetches
//     payloads offloaded to S3 (the producer offloads the events with Event.Offload set).
//   - An audit decorator wraps each worker's SQS client. Before it forwards a DeleteMessage or
//     DeleteMessageBatch, it asks the database (on its own connection, under READ COMMITTED,
//     so it sees only committed rows) whether the inbox row of each message's key exists, and
//     appends the answer to a per-process log that survives SIGKILL.
//   - [Run.Drain] heals nothing by itself: the caller ends its faults and workers, then Drain
//     runs a healthy worker until the queue stays empty over several consecutive empty receives,
//     reads the dead-letter queue, redrives the messages in it whose events were processed,
//     and drains again.
//   - [Check] compares sends, effects, the dead-letter queue and the delete log, and returns a
//     [Report]: lost, duplicated, unexpected, unknown sends, processed-but-in-DLQ (and whether
//     their redrive made a second effect), deletes not preceded by a committed inbox row, and,
//     when told which events must end in the DLQ ([Observations].ExpectDLQ), events that ended
//     otherwise.
//   - [Procs] starts the worker and relay processes, or any program, keeps their output and
//     kills them; [SQSProxy] stands between processes and the SQS server, injects faults,
//     follows the messages and times kills ([SQSProxy.Arm]). Tests outside the package use both
//     too: the payments example's chain test runs its binary under them.
//
// The fault scenarios ([Scenarios]) are shared by the package's tests (small sizes, `make test`)
// and the soak command (harness/cmd/soak, `make soak`).
package reliability

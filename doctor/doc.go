// Package doctor checks a deployment of an inbox worker before it loses a message: the settings
// that exactly-once in effect rests on but that live outside the code. The queue and its
// dead-letter queue (redrive policy, maxReceiveCount, the DLQ's kind and retention, the
// visibility timeout against the handler's time, the retention against the inbox's, the message
// size against the offload threshold, encryption), the SNS subscriptions that feed the queue
// (raw delivery, filter policy against the routes, the queue policy), and the database
// (migrations, layout, grants, synchronous_commit, a transaction-mode pooler with a query mode
// that breaks there, the clock, a purge that is not running, the outbox's backlog).
//
// [Run] returns a [Report] of [Finding] values, each with its severity, the setting, the value
// seen, the value wanted and the fix. An [Error] can lose a message, apply it twice or stop
// processing; a [Warning] costs money or time. `sqsinbox doctor` and the `doctor` subcommand of
// every workerapp program print it.
//
// # It changes nothing
//
// Run only reads: [SQSClient] can only read a queue's URL and attributes, [SNSClient] only list
// subscriptions and read their attributes, and every statement it sends to the database is a
// read, on a pool of its own that uses the simple protocol.
package doctor

// Package core is the lower layer of sqsinbox's internals: the mechanics that the public
// packages (worker, inbox, inbox/idempotency, outbox, migrate) share. Its packages import nothing
// of the module outside internal/core:
//
//   - logdur: durations in logs as Go duration strings ("1.5s"), whatever the log format;
//   - panics: a recovered panic as an error with its stack (handlers, inbox functions);
//   - pgpurge: deleting old rows in short batches under an advisory lock (the inbox's purge, the
//     HTTP keys', the outbox's);
//   - pgtx: a COMMIT of unknown outcome told from a refused one, a lost connection from a failed
//     statement;
//   - plainbody: plain request bodies for the AWS SDK's HTTP clients (aws-sdk-go-v2 #2737);
//   - sqlident: validating and quoting SQL identifiers;
//   - startstop: the start/stop life of the long-lived services (worker.Worker, outbox.Relay).
//
// The rest of internal/ (the test harness, the reliability suite, the development commands) is
// the upper layer: it imports the public packages, and no public package imports it. So the
// import graph reads top to bottom: internal/{pgtest,sqstest,reliability,cmd} → worker, inbox,
// outbox, migrate, cmd/sqsinbox → internal/core. Within the public packages, worker (the SQS
// side) and inbox (the PostgreSQL side) know nothing of each other, and outbox nothing of worker;
// worker/inboxhandler joins the two. TestLayers checks all of it.
package core

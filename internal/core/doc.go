// Package core is sqsinbox's private lower layer, and the only thing under internal/: the
// mechanics that the public packages (worker, inbox, inbox/idempotency, outbox, migrate,
// s3payload, cmd/sqsinbox) share. Its packages import nothing of the module outside
// internal/core:
//
//   - logdur: durations in logs as Go duration strings ("1.5s"), whatever the log format;
//   - panics: a recovered panic as an error with its stack (handlers, inbox functions);
//   - pgpurge: deleting old rows in short batches under an advisory lock (the inbox's purge, the
//     HTTP keys', the outbox's);
//   - pgtx: a COMMIT of unknown outcome told from a refused one, a lost connection from a failed
//     statement;
//   - pooler: telling a transaction pooler (PgBouncer, RDS Proxy) in front of PostgreSQL, and the
//     pgx query modes that work behind one;
//   - plainbody: plain request bodies for the AWS SDK's HTTP clients (aws-sdk-go-v2 #2737);
//   - sqlident: validating and quoting SQL identifiers;
//   - startstop: the start/stop life of the long-lived services (worker.Worker, outbox.Relay);
//   - version: the release this tree is, printed by sqsinbox --version.
//
// The test servers, the reliability suite, the benches and the development commands live in
// harness/, above the product: the harness imports the public packages, and the public packages
// import it only from their test files. So the top-level folders read top to bottom: harness →
// cmd, workerapp → worker → inbox, outbox → migrate, s3payload → internal/core.
// Within the public packages, worker (the SQS side) and inbox (the PostgreSQL side) know nothing
// of each other, and outbox and s3payload nothing of worker; worker/inboxhandler joins the two.
// TestLayers and TestTopLevelLayers check all of it.
package core

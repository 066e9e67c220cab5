// Package harness is sqsinbox's own test and bench harness: the servers its tests run against,
// the reliability suite, the benches and the development commands. It is not for users and has
// no compatibility promise: its packages change whenever the project's tests need them to.
//
// It stands above the product. Its packages import the public packages (worker, inbox, outbox,
// migrate, s3payload, workerapp) and internal/core as they like; the product imports it only
// from its test files. internal/core's TestLayers checks both directions.
//
//   - sqstest: a real SQS-compatible server for tests (GoAws or fauxqs), and SNS beside it;
//   - pgtest: a throwaway PostgreSQL cluster (or TEST_DATABASE_URL);
//   - exampletest: the examples' integration tests against both;
//   - latency: a TCP proxy that adds latency, for the benches;
//   - proccpu: the CPU time a process and its children used;
//   - extclient: the Node producer and consumer used for cross-language checks;
//   - reliability: the suite that proves exactly-once under faults (RELIABILITY.md);
//   - docscheck and tfapply: tests that keep the docs and the Terraform modules true;
//   - cmd/demo, cmd/dev, cmd/soak, cmd/workerbench, cmd/inboxlayout: `make demo`, `make dev`,
//     `make soak`, the worker bench and the inbox-layout bench; cmd/funclen lists the longest
//     functions;
//   - tools: the pinned GoAws, fauxqs and Node client versions, as nested tool modules.
package harness

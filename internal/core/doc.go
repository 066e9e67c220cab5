// Package core is the lower layer of sqsinbox's internals: the mechanics that the public
// packages (worker, inbox, inbox/idempotency, migrate) share. Its packages import nothing of the
// module outside internal/core. The rest of internal/ (the test harness, the reliability suite,
// the development commands) is the upper layer: it imports the public packages, and no public
// package imports it. So the import graph reads top to bottom: internal/{pgtest,sqstest,sqsfake,
// reliability,cmd} → worker, inbox, migrate, cmd/sqsinbox → internal/core.
package core

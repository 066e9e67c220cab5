package workerotel_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The tests read back what the OpenTelemetry SDK recorded (its in-memory exporter and manual
// reader). Those named ...GoAws run a real worker against a real SQS-compatible server (sqstest)
// and PostgreSQL (pgtest); those named ...PG need only PostgreSQL.
var (
	db  *pgtest.Server
	srv *sqstest.Server
)

func TestMain(m *testing.M) { exampletest.MainWith(m, "workerotel", &db, &srv) }

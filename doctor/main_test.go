package doctor_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The doctor's tests seed each misconfiguration on a real SQS server (GoAws, or fauxqs on the
// second pass; SNS on fauxqs only) and a real PostgreSQL (a throwaway cluster, or
// TEST_DATABASE_URL), and run the checks against them. No goroutine may be left behind.
var (
	db  *pgtest.Server
	srv *sqstest.Server
)

func TestMain(m *testing.M) { exampletest.MainWith(m, "doctor", &db, &srv) }

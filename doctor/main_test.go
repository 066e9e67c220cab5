package doctor_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The doctor's tests seed each misconfiguration on a real SQS server (GoAws, or fauxqs on the
// second pass; SNS on fauxqs only) and a real PostgreSQL (a throwaway cluster, or
// TEST_DATABASE_URL), and run the checks against them.
var (
	db  *pgtest.Server
	srv *sqstest.Server
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	ctx := context.Background()
	s, err := sqstest.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv = s
	defer srv.Close()
	d, err := pgtest.Start(ctx, "doctor")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db = d
	defer db.Close()
	return m.Run()
}

package workerotel_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/internal/pgtest"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
)

// The tests read back what the OpenTelemetry SDK recorded (its in-memory exporter and manual
// reader). Those named ...GoAws run a real worker against a real SQS-compatible server (sqstest)
// and PostgreSQL (pgtest); those named ...PG need only PostgreSQL.
var (
	db  *pgtest.Server
	srv *sqstest.Server
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	if srv, err = sqstest.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	if db, err = pgtest.Start(ctx, "workerotel"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	code := m.Run()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("github.com/sqsinbox/sqsinbox/internal/sqstest.tryGoAws.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

package inboxtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
)

// The tests use the fixture on a database of this test binary's own: pgtest creates it on the
// server TEST_DATABASE_URL names or on a throwaway cluster it starts from the local binaries, and
// TEST_DATABASE_URL is then set to it, as a user's environment would name theirs. None needs an
// SQS server.
var server *pgtest.Server

func TestMain(m *testing.M) {
	ignore := goleak.IgnoreCurrent()
	db, err := pgtest.Start(context.Background(), "inboxtest")
	server = db
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := os.Setenv(inboxtest.EnvURL, db.URL); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	db.Close()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

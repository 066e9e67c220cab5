package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// envRunMain makes the test binary run main instead of the tests.
const envRunMain = "FIRSTWORKER_RUN_MAIN"

// The end-to-end test runs main against real servers: PostgreSQL from pgtest (a throwaway
// cluster, or TEST_DATABASE_URL) and GoAws v0.5.4 from sqstest (or the server
// AWS_ENDPOINT_URL_SQS names).
var srv exampletest.Servers

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	exampletest.Main(m, "firstworker", &srv)
}

// TestFirstWorkerEndToEnd follows the README's steps: migrate, create pick_tasks, start the
// worker (main, in a process of its own, given DATABASE_URL and QUEUE_URL), send OrderPaid events
// (one three times, one without an order_id), and stop it with SIGTERM. Each good order gets one
// pick task; the bad event none (it is left to the retry-then-DLQ way); Run returns and main
// exits 0 within the stop budget.
func TestFirstWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	pool := srv.Pool(t)
	if _, err := inbox.Migrate(t.Context(), pool, ""); err != nil { // sqsinbox migrate up
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE pick_tasks (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	q := srv.Queue(t, "first")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "DATABASE_URL="+srv.DB.URL, "QUEUE_URL="+q.URL)
	out := &sqstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	srv.Send(t, q.URL, []sqstest.Message{
		{Body: `{"id":"evt_1","order_id":"o-1"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_3","order_id":"o-3"}`},
		{Body: `{"id":"evt_4"}`},
	})
	count := func(order string) int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks WHERE order_id = $1`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sqstest.WaitFor(t, time.Minute, "the three good orders picked, and the queue down to the bad event", func() (bool, string) {
		n, err := sqstest.Count(t.Context(), srv.SQS.Client(), q.URL)
		if err != nil {
			return false, err.Error()
		}
		return count("o-1") == 1 && count("o-2") == 1 && count("o-3") == 1 && n <= 1,
			fmt.Sprintf("pick tasks %d/%d/%d, %d messages left; output:\n%s", count("o-1"), count("o-2"), count("o-3"), n, out.String())
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("main after SIGTERM: %v; output:\n%s", err, out.String())
	}
	var total int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 3 || count("o-2") != 1 {
		t.Errorf("%d pick tasks (o-2: %d); want 3, one per good order", total, count("o-2"))
	}
}

// TestRefusesWithoutDatabase runs main in a process of its own: with neither DATABASE_URL nor a
// PG* variable that says where the database is, it exits 1 naming them, instead of connecting
// to the local socket's default database. No server is needed: the queue's endpoint is closed.
func TestRefusesWithoutDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"nothing set", nil},
		{"port, user and password say nothing of where", []string{"PGPORT=5432", "PGUSER=app", "PGPASSWORD=secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "PG") && !strings.HasPrefix(k, "AWS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, envRunMain+"=1", "QUEUE_URL=http://127.0.0.1:1/000000000000/none",
				"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1", "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
			cmd.Env = append(cmd.Env, tc.extra...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("main: %v, want exit status 1; output:\n%s", err, out)
			}
			for _, name := range []string{"DATABASE_URL", "PGHOST", "PGDATABASE", "PGSERVICE"} {
				if !strings.Contains(string(out), name) {
					t.Errorf("the message does not name %s:\n%s", name, out)
				}
			}
		})
	}
}

package reliability_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The scenarios run against a real PostgreSQL (pgtest) and a real SQS-compatible server
// (sqstest: GoAws, fauxqs with SQSINBOX_TEST_SQS=fauxqs, or AWS_ENDPOINT_URL_SQS). Worker processes are this test binary re-executed:
// TestMain runs reliability.WorkerMain instead of the tests when reliability.EnvWorker is set, and
// the warehouse example's worker (reliability.WarehouseMain) when reliability.EnvWarehouse is.
var env *reliability.Env

func TestMain(m *testing.M) {
	if code := reliability.WorkerMain(); code >= 0 {
		os.Exit(code)
	}
	if code := reliability.WarehouseMain(); code >= 0 {
		os.Exit(code)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	srv, err := sqstest.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	db, err := pgtest.Start(ctx, "reliability")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	dir, err := os.MkdirTemp("", "reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env = &reliability.Env{DB: db, SQS: srv, Dir: dir,
		Command: func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }}
	code := m.Run()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "reliability: delete logs and worker logs kept in", dir)
	}
	printTable()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("github.com/sqsinbox/sqsinbox/harness/sqstest.tryGoAws.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

var (
	tableMu sync.Mutex
	table   []reliability.Report
)

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 || !testing.Verbose() {
		return
	}
	fmt.Println("reliability checker table:")
	_ = reliability.WriteTable(os.Stdout, table)
}

// small is the size every scenario runs at under `make test`.
var small = reliability.Size{Messages: 300, Workers: 2, Spread: 3 * time.Second}

// runScenario runs the named scenario at size s and returns its report, failing t on errors.
func runScenario(t *testing.T, name string, s reliability.Size) *reliability.Report {
	t.Helper()
	var sc *reliability.Scenario
	for _, x := range reliability.Scenarios() {
		if x.Name == name {
			sc = &x
		}
	}
	if sc == nil {
		t.Fatalf("no scenario %q", name)
	}
	if sc.Skip != nil {
		if why := sc.Skip(env); why != "" {
			t.Skip(why)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	rep, err := sc.Run(ctx, env, s)
	if err != nil {
		t.Fatalf("scenario %s: %v", name, err)
	}
	tableMu.Lock()
	table = append(table, *rep)
	tableMu.Unlock()
	t.Logf("\n%s", rep)
	return rep
}

// requirePass fails t with the report's problems.
func requirePass(t *testing.T, rep *reliability.Report) {
	t.Helper()
	if p := rep.Problems(); len(p) > 0 {
		t.Errorf("the checker found problems:\n%s", rep)
	}
	if rep.SentOK == 0 || rep.Effected == 0 {
		t.Errorf("nothing was sent or effected:\n%s", rep)
	}
}

package idempotency_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

// The crash tests re-execute the test binary as a child that serves the middleware, enters the
// handler and stops there; the parent then kills or freezes it.
const childEnv = "IDEMPOTENCY_TEST_CHILD"

func runChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEMPOTENCY_TEST_DB"))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	lease, _ := time.ParseDuration(os.Getenv("IDEMPOTENCY_TEST_LEASE"))
	mw, err := idempotency.New(pool, &idempotency.Config{
		Schema: os.Getenv("IDEMPOTENCY_TEST_SCHEMA"), Principal: principal, Lease: lease,
	})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	a := &app{schema: os.Getenv("IDEMPOTENCY_TEST_SCHEMA")}
	a.hook = func(w http.ResponseWriter, r *http.Request) bool {
		fmt.Println("IN_HANDLER")
		select {} // until killed
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ADDR", ln.Addr())
	_ = http.Serve(ln, mw.Handler(a))
	return 1
}

type child struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string
}

func startChild(t *testing.T, schema string, lease time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "IDEMPOTENCY_TEST_DB="+db.URL,
		"IDEMPOTENCY_TEST_SCHEMA="+schema, "IDEMPOTENCY_TEST_LEASE="+lease.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 8)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // this child only, by its own handle
		_ = cmd.Wait()
	})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	line := c.next(t)
	addr, ok := strings.CutPrefix(line, "ADDR ")
	if !ok {
		t.Fatalf("child said %q", line)
	}
	c.addr = "http://" + addr
	return c
}

func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("the child exited")
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("the child said nothing for 60s")
	}
	return ""
}

func TestCrashMidRequestFreesTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		lease time.Duration
	}{
		// A killed process's connection closes, and the database rolls its attempt back at once.
		{"killed", syscall.SIGKILL, idempotency.DefaultLease},
		// A frozen process keeps its connection open: the lease (idle_in_transaction_session_timeout)
		// frees the key.
		{"frozen", syscall.SIGSTOP, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChild(t, b.schema, tc.lease)
			rq := request{client: "crash-" + tc.name, keys: []string{"crash"}, body: payBody}
			start := time.Now()
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() { _, _ = doURL(ctx, c.addr, rq) }()
			if l := c.next(t); l != "IN_HANDLER" {
				t.Fatalf("child said %q", l)
			}
			if r := b.do(t, rq); r.status != http.StatusConflict {
				t.Fatalf("while the child holds the key: %d %s", r.status, r.body)
			}
			if err := c.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			var got response
			eventually(t, 60*time.Second, "the key to be claimable", func() bool {
				got = b.do(t, rq)
				return got.status != http.StatusConflict
			})
			elapsed := time.Since(start)
			if got.status != http.StatusCreated || got.replayed() {
				t.Fatalf("after the crash: %d %s", got.status, got.body)
			}
			if tc.sig == syscall.SIGSTOP && elapsed < tc.lease {
				t.Fatalf("the key was freed after %v, before the lease of %v", elapsed, tc.lease)
			}
			var n int
			if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.schema+".payments WHERE client = $1", rq.client).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d payments (err %v), want 1: the crashed attempt's write must have rolled back", n, err)
			}
			t.Logf("key claimable %v after the request began", elapsed.Round(time.Millisecond))
		})
	}
}

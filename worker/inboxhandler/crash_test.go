package inboxhandler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// Child modes.
const (
	modeRun          = "run"                // run until SIGTERM
	modeHangInTx     = "hang-before-commit" // the at-th handler hangs inside its transaction
	modeHangAfterTx  = "hang-after-commit"  // the at-th message hangs after its commit, before its delete
	envChildQueue    = "SQSINBOX_CHILD_QUEUE"
	envChildSchema   = "SQSINBOX_CHILD_SCHEMA"
	envChildMark     = "SQSINBOX_CHILD_MARK"
	envChildAt       = "SQSINBOX_CHILD_AT"
	childConcurrency = 8
)

// TestChild is not a test: it is the body of a worker process that the crash tests start by
// re-executing the test binary with envChild set. Without envChild it returns at once.
func TestChild(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := os.Getenv(envChildSchema)
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := strconv.Atoi(os.Getenv(envChildAt))
	var n atomic.Int64
	hang := func(key string) {
		if err := os.WriteFile(os.Getenv(envChildMark), []byte(key), 0o600); err != nil {
			t.Error(err)
		}
		<-make(chan struct{}) // until SIGKILL
	}
	h, err := inboxhandler.New(ib, "warehouse", nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		key, _, _ := inbox.EventKey(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects (event_id) VALUES ($1)`, key); err != nil {
			return err
		}
		if mode == modeHangInTx && n.Add(1) == int64(at) {
			hang(key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var handler worker.Handler = h
	if mode == modeHangAfterTx {
		handler = worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			err := h.Handle(ctx, m)
			if err == nil && n.Add(1) == int64(at) {
				key, _ := inboxhandler.DefaultKey(m)
				hang(key)
			}
			return err
		})
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{
		QueueURL: os.Getenv(envChildQueue), Concurrency: childConcurrency, WaitTime: time.Second,
		Backoff: func(int) time.Duration { return time.Second }, Handler: handler,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
}

type child struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
	mark string
}

func startChild(t *testing.T, b *bundle, queueURL, mode string, at int) *child {
	t.Helper()
	c := &child{done: make(chan error, 1), mark: filepath.Join(t.TempDir(), "mark")}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	c.cmd.Env = append(os.Environ(),
		envChild+"="+mode,
		"SQSINBOX_CHILD_DB="+dbURL,
		envChildQueue+"="+queueURL,
		envChildSchema+"="+b.schema,
		envChildMark+"="+c.mark,
		envChildAt+"="+strconv.Itoa(at),
	)
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
		c.done <- nil
	})
	return c
}

// waitMark waits for the child to hang and returns the event key it hangs on.
func (c *child) waitMark(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(c.mark); err == nil && len(b) > 0 {
			return string(b)
		}
		select {
		case err := <-c.done:
			c.done <- err
			t.Fatalf("child exited before it hung: %v\n%s", err, c.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("child did not hang within 60 s\n%s", c.out.String())
	return ""
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-c.done
	c.done <- err
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("killed child: %v", err)
	}
}

// term stops the child the way ECS does (SIGTERM) and requires a clean exit.
func (c *child) term(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Fatalf("child did not stop cleanly: %v\n%s", err, c.out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("child did not stop within 60 s of SIGTERM\n%s", c.out.String())
	}
}

func (b *bundle) waitEffects(t *testing.T, q *sqstest.Queue, want int) {
	t.Helper()
	sqstest.WaitFor(t, 90*time.Second, fmt.Sprintf("%d effects and a drained queue", want), func() (bool, string) {
		n := b.count(t, `SELECT count(DISTINCT event_id) FROM `+b.schema+`.effects`)
		left, err := sqstest.Count(context.Background(), srv.Client(), q.URL)
		if err != nil {
			return false, err.Error()
		}
		return n == want && left == 0, fmt.Sprintf("%d effects, %d messages left", n, left)
	})
}

// TestCrashInsideHandler (the pass's SQS server, real processes): a worker is SIGKILLed while a handler is
// inside its transaction; its writes vanish with the claim, and a restarted worker does the work
// once.
func TestCrashInsideHandler(t *testing.T) { crashTest(t, modeHangInTx) }

// TestCrashAfterCommit (the pass's SQS server, real processes): a worker is SIGKILLed after a commit and
// before the delete; the redelivery finds the inbox row, is deleted, and nothing runs twice.
func TestCrashAfterCommit(t *testing.T) { crashTest(t, modeHangAfterTx) }

func crashTest(t *testing.T, mode string) {
	t.Parallel()
	const n = 200
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "crash", VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 50})
	ids, msgs := events(n)
	if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	first := startChild(t, b, q.URL, mode, n/4)
	key := first.waitMark(t)
	committed := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects WHERE event_id = $1`, key)
	switch {
	case mode == modeHangInTx && committed != 0:
		t.Fatalf("event %s hangs inside its transaction but has %d effects", key, committed)
	case mode == modeHangAfterTx && committed != 1:
		t.Fatalf("event %s hangs after its commit but has %d effects", key, committed)
	}
	first.kill(t)
	second := startChild(t, b, q.URL, modeRun, 0)
	b.waitEffects(t, q, n)
	second.term(t)
	b.checkOnce(t, ids)
	if t.Failed() {
		t.Logf("first child:\n%s\nsecond child:\n%s", first.out.String(), second.out.String())
	}
}

// TestTwoProcesses (the pass's SQS server, real processes): two worker processes share a queue on which
// every event was sent twice; each event has exactly one effect.
func TestTwoProcesses(t *testing.T) {
	t.Parallel()
	const n = 300
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "twoproc", VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 50})
	ids, msgs := events(n)
	// Duplicates on purpose: each event twice, interleaved, so both processes see both copies.
	var all []sqstest.Message
	for i := range msgs {
		all = append(all, msgs[i], msgs[(i+n/2)%n])
	}
	if err := sqstest.Send(t.Context(), c, q.URL, all); err != nil {
		t.Fatal(err)
	}
	p1 := startChild(t, b, q.URL, modeRun, 0)
	p2 := startChild(t, b, q.URL, modeRun, 0)
	b.waitEffects(t, q, n)
	p1.term(t)
	p2.term(t)
	b.checkOnce(t, ids)
	if k := b.count(t, `SELECT count(DISTINCT pid) FROM `+b.schema+`.effects`); k < 2 {
		t.Logf("only %d database sessions did the work", k)
	}
}

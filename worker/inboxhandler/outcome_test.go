package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestOutcomeTable (GoAws or fauxqs, and PostgreSQL): each row of the outcome table of the inbox's
// package doc, run end to end on both paths, one message per transaction (Inbox.Run,
// HandlerBatch 1) and batched (Inbox.RunBatch, HandlerBatch 10), with the same expectations. Each
// row sends ten events; one of them ("evt-bad") meets a handler that misbehaves as the row says,
// the nine others a handler that writes one effect. maxReceiveCount is 3 and the backoff 0.
//
// Expected on both paths: the nine good events are applied once each and never fail; the bad
// event ends as its row says, with each of its failed attempts recorded in the inbox (none where
// it did not fail, the broken deployment included) (in the DLQ after exactly 3 failed receives, with nothing of it
// committed; or applied once); the worker pauses only for the broken deployment, and then
// resumes once the deployment is fixed.
func TestOutcomeTable(t *testing.T) {
	t.Parallel()
	type row struct {
		name string
		// bad is the misbehaving handler; late is the table a broken deployment lacks.
		bad func(b *bundle, late string) func(ctx context.Context, tx pgx.Tx) error
		// end: "dlq" (dead-lettered after 3 failures, no effect), "applied" (one effect), or
		// "paused" (the worker pauses, nothing fails, all applied once the table exists).
		end string
		// logs is a text the failure's log line must hold (the named error).
		logs string
		// timeout is the worker's HandlerTimeout for the row (0: the default).
		timeout time.Duration
	}
	write := func(b *bundle, ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.effects (event_id) VALUES ('evt-bad')`)
		return err
	}
	rows := []row{
		{name: "returns-error", end: "dlq", logs: "boom", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				return errors.New("boom")
			}
		}},
		{name: "swallows-sql-error", end: "dlq", logs: "22012", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_, _ = tx.Exec(ctx, `SELECT 1/0`) // division_by_zero, swallowed
				return nil
			}
		}},
		{name: "rows-open", end: "dlq", logs: "still open", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_, err := tx.Query(ctx, `SELECT generate_series(1, 1000)`) //nolint:sqlclosecheck // never closed, on purpose
				return err
			}
		}},
		{name: "timeout-in-statement", end: "dlq", logs: "timeout", timeout: 700 * time.Millisecond,
			bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
				return func(ctx context.Context, tx pgx.Tx) error {
					if err := write(b, ctx, tx); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `SELECT pg_sleep(30)`); err != nil {
						return fmt.Errorf("slow query: %v", err) //nolint:errorlint // the chain is cut on purpose
					}
					return nil
				}
			}},
		{name: "commits", end: "applied", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				defer func() { _ = tx.Rollback(ctx) }() // the usual idiom: a no-op after Commit
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
		}},
		{name: "rolls-back", end: "dlq", logs: "rolled back", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_ = tx.Rollback(ctx)
				return nil
			}
		}},
		{name: "panics", end: "dlq", logs: "handler bug", bad: func(b *bundle, _ string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				panic("handler bug")
			}
		}},
		{name: "broken-deployment", end: "paused", bad: func(b *bundle, late string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+late+` (event_id) VALUES ('evt-bad')`); err != nil {
					return fmt.Errorf("late table: %v", err) //nolint:errorlint // the chain is cut on purpose
				}
				return nil
			}
		}},
	}
	for _, r := range rows {
		for _, path := range []struct {
			name  string
			batch int
		}{{"run", 1}, {"batch", 10}} {
			t.Run(r.name+"/"+path.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, nil)
				late := b.schema + ".late"
				bad := r.bad(b, late)
				h := b.handler(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
					if strings.Contains(string(m.Body), "evt-bad") {
						return bad(ctx, tx)
					}
					return b.effect(ctx, tx, m)
				})
				c := srv.Client()
				q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outcome", MaxReceiveCount: 3})
				var msgs []sqstest.Message
				var good []string
				for i := range 9 {
					id := fmt.Sprintf("evt-%d", i)
					good = append(good, id)
					msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":%q}`, id)})
				}
				msgs = append(msgs[:4], append([]sqstest.Message{{Body: `{"id":"evt-bad"}`}}, msgs[4:]...)...)
				if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
					t.Fatal(err)
				}
				met := &counters{}
				logs := newLogCapture()
				w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
					HandlerBatch: path.batch, HandlerTimeout: r.timeout, Backoff: func(int) time.Duration { return 0 },
					Logger: slog.New(logs), Handler: h})
				switch r.end {
				case "dlq":
					sqstest.WaitCount(t, c, q.DLQURL, 1, 60*time.Second)
					sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
				case "applied":
					sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
				case "paused":
					sqstest.WaitFor(t, 60*time.Second, "the worker to pause", func() (bool, string) {
						st := w.State()
						return st.Paused, fmt.Sprintf("state %+v", st)
					})
					if st := w.State(); !strings.Contains(st.PauseReason, "42P01") || !st.BrokenDeployment || worker.Ready(st, time.Hour, time.Now()) {
						t.Errorf("state %+v: want a pause for a broken deployment naming SQLSTATE 42P01, and not ready", st)
					}
					// Once per pause: a probe of a good event ends a pause, and evt-bad, back, begins one.
					if n, back := logs.count("ERROR worker: broken deployment"), logs.count("INFO worker: the dependency is back"); n < 1 || n > back+1 {
						t.Errorf("%d Error lines for the broken deployment over %d pauses ended; want one per pause; logged:\n%s", n, back, logs)
					}
					if _, err := b.pool.Exec(t.Context(), `CREATE TABLE `+late+` (event_id text)`); err != nil {
						t.Fatal(err)
					}
					sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
				}
				workertest.Stop(t, w)
				want := good
				if r.end != "dlq" {
					want = append(want, "evt-bad")
				}
				b.checkOnce(t, want)
				failed := met.failed.Load()
				switch r.end {
				case "dlq":
					if failed != 3 {
						t.Errorf("failed = %d, want 3 (the bad event's three receives; no good event fails)", failed)
					}
					if !logs.has("message failed", r.logs) {
						t.Errorf("no failure logged with %q; logged:\n%s", r.logs, logs)
					}
					if n, err := sqstest.Count(t.Context(), c, q.DLQURL); err != nil || n != 1 {
						t.Errorf("DLQ holds %d messages (%v), want 1", n, err)
					}
				default:
					if failed != 0 {
						t.Errorf("failed = %d, want 0", failed)
					}
					if n, err := sqstest.Count(t.Context(), c, q.DLQURL); err != nil || n != 0 {
						t.Errorf("DLQ holds %d messages (%v), want 0", n, err)
					}
				}
				b.checkFailures(t, q.Name, r.end, r.logs)
				paused := logs.has("pausing receives", "")
				if paused != (r.end == "paused") {
					t.Errorf("the worker paused: %v, want %v; logged:\n%s", paused, r.end == "paused", logs)
				}
			})
		}
	}
}

// logCapture is a slog.Handler that keeps every record as one line of text.
type logCapture struct {
	sink  *logSink
	attrs []slog.Attr
}

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func newLogCapture() *logCapture { return &logCapture{sink: &logSink{}} }

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range l.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.sink.mu.Lock()
	l.sink.lines = append(l.sink.lines, b.String())
	l.sink.mu.Unlock()
	return nil
}

func (l *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCapture{sink: l.sink, attrs: append(append([]slog.Attr(nil), l.attrs...), as...)}
}

func (l *logCapture) WithGroup(string) slog.Handler { return l }

// has reports whether a line holds both msg and text.
func (l *logCapture) has(msg, text string) bool {
	l.sink.mu.Lock()
	defer l.sink.mu.Unlock()
	for _, s := range l.sink.lines {
		if strings.Contains(s, msg) && strings.Contains(s, text) {
			return true
		}
	}
	return false
}

// count returns the number of lines that begin with prefix.
func (l *logCapture) count(prefix string) int {
	l.sink.mu.Lock()
	defer l.sink.mu.Unlock()
	n := 0
	for _, s := range l.sink.lines {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func (l *logCapture) String() string {
	l.sink.mu.Lock()
	defer l.sink.mu.Unlock()
	return strings.Join(l.sink.lines, "\n")
}

// checkFailures checks the failure records of evt-bad, the outcome table's bad event, that ended
// as end: after "dlq", one per failed receive (3), each naming the handler, the queue, the one
// SQS message, its receive count (on a server that counts them) and an error holding text; else
// none.
func (b *bundle) checkFailures(t *testing.T, queue, end, text string) {
	t.Helper()
	fs, err := b.ib.Failures(t.Context(), []string{"evt-bad"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if end != "dlq" {
		if len(fs) != 0 {
			t.Errorf("%d failures recorded for evt-bad, which did not fail: %+v", len(fs), fs)
		}
		return
	}
	if len(fs) != 3 {
		t.Fatalf("%d failures recorded for evt-bad, want 3: %+v", len(fs), fs)
	}
	for i, f := range fs {
		if f.Handler != "warehouse" || f.Queue != queue || f.MessageID == "" || f.MessageID != fs[0].MessageID ||
			!strings.Contains(f.Error, text) || f.Instance == "" || f.FailedAt.IsZero() {
			t.Errorf("failure %d: %+v; want handler warehouse, queue %s, the one message, an error holding %q", i, f, queue, text)
		}
		if want := 3 - i; !srv.GoAws && f.ReceiveCount != want {
			t.Errorf("failure %d (newest first) has receive count %d, want %d", i, f.ReceiveCount, want)
		}
	}
}

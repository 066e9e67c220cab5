package inboxhandler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestUnrecordedFailureChangesNothing (GoAws or fauxqs, and PostgreSQL): when a failure cannot
// be recorded (the inbox_failures table is gone), the message's outcome is what it would be
// anyway, on both paths: the failing event is dead-lettered after its 3 receives, the good
// events are applied once, the worker never pauses, and each unrecorded failure is counted and
// logged.
func TestUnrecordedFailureChangesNothing(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 10} {
		t.Run(map[int]string{1: "run", 10: "batch"}[batch], func(t *testing.T) {
			t.Parallel()
			logs := newLogCapture()
			b := setup(t, &inbox.Config{Logger: slog.New(logs)})
			if _, err := b.pool.Exec(t.Context(), `DROP TABLE `+b.schema+`.inbox_failures`); err != nil {
				t.Fatal(err)
			}
			h := b.handler(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
				if strings.Contains(string(m.Body), "evt-bad") {
					return errors.New("boom")
				}
				return b.effect(ctx, tx, m)
			})
			c := srv.Client()
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "unrec", MaxReceiveCount: 3})
			good, msgs := events(4)
			msgs = append(msgs, sqstest.Message{Body: `{"id":"evt-bad"}`})
			if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
				t.Fatal(err)
			}
			met := &counters{}
			w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met, HandlerBatch: batch,
				Backoff: func(int) time.Duration { return 0 }, Logger: slog.New(logs), Handler: h})
			sqstest.WaitCount(t, c, q.DLQURL, 1, 60*time.Second)
			sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
			workertest.Stop(t, w)
			b.checkOnce(t, good)
			if f := met.failed.Load(); f != 3 {
				t.Errorf("failed = %d, want 3", f)
			}
			if n := b.ib.FailuresNotRecorded(); n != 3 {
				t.Errorf("FailuresNotRecorded = %d, want 3", n)
			}
			if !logs.has("a failure was not recorded", "inbox_failures") || logs.has("pausing receives", "") {
				t.Errorf("want a warning per unrecorded failure naming the table, and no pause; logged:\n%s", logs)
			}
		})
	}
}

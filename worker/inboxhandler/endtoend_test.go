package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

type counters struct{ processed, duplicates, failed atomic.Int64 }

func (c *counters) Add(k worker.Counter, n int) {
	switch k {
	case worker.Processed:
		c.processed.Add(int64(n))
	case worker.Duplicates:
		c.duplicates.Add(int64(n))
	case worker.Failed:
		c.failed.Add(int64(n))
	}
}
func (c *counters) Observe(worker.Histogram, time.Duration) {}
func (c *counters) SetInFlight(int)                         {}

// TestEndToEnd (the pass's SQS server): every event sent twice, as two SQS messages; one effect each, the
// second deliveries counted as duplicates and deleted. Each event's inbox row records the
// delivery that applied it: its message id (one of the event's two), the queue, the receive
// count, the inbox's instance, and the trace id of the traceparent the message carried.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "e2e-task"})
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "e2e", MaxReceiveCount: 5})
	ids, msgs := events(300)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i := range msgs {
		msgs[i].Attributes = map[string]string{"traceparent": "00-" + trace + "-00f067aa0ba902b7-01"}
	}
	if err := sqstest.Send(t.Context(), c, q.URL, append(msgs, msgs...)); err != nil {
		t.Fatal(err)
	}
	met := &counters{}
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 16, WaitTime: time.Second,
		Metrics: met, Handler: b.handler(t, nil)})
	sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)
	b.checkOnce(t, ids)
	if p, d := met.processed.Load(), met.duplicates.Load(); p != 300 || d != 300 {
		t.Errorf("processed %d, duplicates %d; want 300 and 300", p, d)
	}
	got, err := b.ib.Lookup(t.Context(), ids[7])
	if err != nil || len(got) != 1 {
		t.Fatalf("Lookup(%s) = %+v, %v; want one row", ids[7], got, err)
	}
	e := got[0]
	if len(e.MessageID) != 36 || e.Queue != q.Name || e.ReceiveCount < 1 || e.Instance != "e2e-task" || e.TraceID != trace {
		t.Errorf("the row of %s records %+v; want a message id, queue %s, a receive count, instance e2e-task, trace %s", ids[7], e, q.Name, trace)
	}
}

// TestEndToEndGenerations (the pass's SQS server): the same in an inbox switched to the
// generations layout (inbox.SwitchToGenerations), and to the keytime layout (inbox.SwitchToKeyTime;
// half the events keyed by UUIDv7s, routed by their time, half by keys without a time), with rows
// from before the switch: every event sent twice is applied once, and the events applied before
// the switch are duplicates.
func TestEndToEndGenerations(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{inbox.LayoutGenerations, inbox.LayoutKeyTime} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			c := srv.Client()
			ids, msgs := events(200)
			switchTo := inbox.SwitchToGenerations
			if layout == inbox.LayoutKeyTime {
				switchTo = inbox.SwitchToKeyTime
				ms := uint64(time.Now().UnixMilli())
				for i := 0; i < len(ids); i += 2 {
					ids[i] = fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16, ms&0xffff, i, 0x8000|rand.IntN(0x4000), rand.Int64N(1<<48))
					msgs[i].Body = fmt.Sprintf(`{"id":%q,"order":"o-%d"}`, ids[i], i)
				}
			}
			for _, id := range ids[:50] { // applied in the table layout, before the switch
				if _, err := b.ib.Run(t.Context(), "warehouse", id, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.effects (event_id) VALUES ($1)`, id)
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := switchTo(t.Context(), b.pool, b.schema, 14*24*time.Hour); err != nil {
				t.Fatal(err)
			}
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "e2e-gen", MaxReceiveCount: 5})
			if err := sqstest.Send(t.Context(), c, q.URL, append(msgs, msgs...)); err != nil {
				t.Fatal(err)
			}
			met := &counters{}
			w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 8, WaitTime: time.Second,
				Metrics: met, Handler: b.handler(t, nil)})
			sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
			workertest.Stop(t, w)
			b.checkOnce(t, ids)
			if p, d := met.processed.Load(), met.duplicates.Load(); p != 150 || d != 250 {
				t.Errorf("processed %d, duplicates %d; want 150 and 250", p, d)
			}
			if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_events`); n != 150 {
				t.Errorf("%d rows in processed_events; want 150", n)
			}
		})
	}
}

// TestBadKeyGoesToDLQ (the pass's SQS server, PostgreSQL): a message without a key is retried and
// then dead-lettered, never processed and never silently discarded; each failed receive is
// recorded, without a key.
func TestBadKeyGoesToDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "badkey", MaxReceiveCount: 3})
	if err := sqstest.Send(t.Context(), c, q.URL, []sqstest.Message{{Body: `{"no_id":1}`}, {Body: `not json`}}); err != nil {
		t.Fatal(err)
	}
	met := &counters{}
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
		Backoff: func(int) time.Duration { return 0 }, Handler: b.handler(t, nil)})
	sqstest.WaitCount(t, c, q.DLQURL, 2, 30*time.Second)
	workertest.Stop(t, w)
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); n != 0 {
		t.Errorf("%d effects, want 0", n)
	}
	if f := met.failed.Load(); f != 6 {
		t.Errorf("failed = %d, want 2 messages × maxReceiveCount 3", f)
	}
	// Each failed receive is recorded without a key, under its message: 3 for each message.
	var perMessage []int
	err := b.pool.QueryRow(t.Context(), `SELECT array_agg(n ORDER BY n) FROM (SELECT count(*) AS n FROM `+b.schema+
		`.inbox_failures WHERE event_id IS NULL AND handler = 'warehouse' AND error LIKE '%message%' GROUP BY message_id) s`).Scan(&perMessage)
	if err != nil || len(perMessage) != 2 || perMessage[0] != 3 || perMessage[1] != 3 {
		t.Errorf("failures recorded per message: %v (%v); want 3 for each of the 2, without a key", perMessage, err)
	}
}

// TestAttributeKey (the pass's SQS server): the event_id attribute wins over the body's id.
func TestAttributeKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "attr"})
	msgs := []sqstest.Message{
		{Body: `{"id":"body-1"}`, Attributes: map[string]string{"event_id": "attr-1"}},
		{Body: `{"id":"body-2"}`, Attributes: map[string]string{"event_id": "attr-1"}},
		{Body: `{"id":"body-3"}`},
	}
	if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: b.handler(t, nil)})
	sqstest.WaitCount(t, c, q.URL, 0, 30*time.Second)
	workertest.Stop(t, w)
	b.checkOnce(t, []string{"attr-1", "body-3"})
}

// TestStartRefusesShortRetention (the pass's SQS server): the worker does not start when the inbox would
// forget events the queue (or its DLQ) can still redeliver, when the schema is not migrated, or
// when the redrive policy's maxReceiveCount is too low to outlast a frozen claim holder.
func TestStartRefusesShortRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "retention", Retention: time.Hour})
	qd := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "retention-dlq", Retention: time.Hour, MaxReceiveCount: 3})
	q2 := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "retention-mrc2", Retention: time.Hour, MaxReceiveCount: 2})

	short := newInbox(t, b.pool, b.schema, &inbox.Config{Retention: 2 * time.Hour})
	for _, tc := range []struct {
		url  string
		ib   *inbox.Inbox
		fail bool
	}{
		{q.URL, short, false}, // 2 h ≥ 1 h
		{qd.URL, short, true}, // the DLQ keeps 14 days
		{qd.URL, b.ib, false}, // the default retention is 28 days
		{q2.URL, b.ib, true},  // maxReceiveCount 2 cannot outlast a frozen claim holder
		{q.URL, newInbox(t, b.pool, "not_migrated", nil), true},
	} {
		h, err := newHandler(tc.ib)
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(c, &worker.Config{QueueURL: tc.url, WaitTime: time.Second, Handler: h})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Start(t.Context())
		var re *inbox.RetentionError
		switch {
		case tc.fail && err == nil:
			t.Errorf("%s: Start succeeded, want a refusal", tc.url)
		case !tc.fail && err != nil:
			t.Errorf("%s: Start: %v", tc.url, err)
		case err != nil && tc.ib == short && !errors.As(err, &re):
			t.Errorf("Start = %v, want a *inbox.RetentionError", err)
		}
		if err == nil {
			workertest.Stop(t, w)
		}
	}
}

func newHandler(ib *inbox.Inbox) (worker.Handler, error) {
	return inboxhandler.New(ib, "h", nil, func(context.Context, pgx.Tx, *worker.Message) error { return nil })
}

// TestStartNamesASilentDatabase (the pass's SQS server, and a local TCP listener standing in for a database
// that accepts connections and never answers): Start gives up after Config.StartTimeout with an
// error that names the database, instead of hanging.
func TestStartNamesASilentDatabase(t *testing.T) {
	t.Parallel()
	addr := sqstest.SilentEndpoint(t)
	pool, err := pgxpool.New(t.Context(), "postgres://app@"+addr+"/orders")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h, err := newHandler(newInbox(t, pool, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "silentdb", MaxReceiveCount: 3})
	w, err := worker.New(srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: h,
		StartTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = w.Start(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Start = %v (caller's deadline passed: %v), want a refusal within StartTimeout", err, ctx.Err() != nil)
	}
	if !strings.Contains(err.Error(), "database "+addr) {
		t.Errorf("Start = %v; want it to name the database %s", err, addr)
	}
}

package inboxhandler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestOutageKeepsMessagesInHand (PostgreSQL: a throwaway cluster of its own, stopped for longer
// than twice the visibility timeout; SQS: GoAws or fauxqs): the messages a worker holds when its
// database goes down (four in running handlers, four prefetched) are not sent back to the queue:
// their leases keep them invisible through the outage, one of them probes, and they all run when
// the database is back. So no message is received a second time (checked on servers that count
// receives: fauxqs, not GoAws, whose ApproximateReceiveCount is always 1), none reaches the DLQ
// (maxReceiveCount 2), and each event has one effect. On the old code, which sent them back with
// a delay, each of the eight was received again.
func TestOutageKeepsMessagesInHand(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg, b := ownedBundle(t, "outage")
	const vis = 3 * time.Second
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outage", VisibilityTimeout: vis, MaxReceiveCount: 2})
	ids, msgs := events(40)
	if err := sqstest.Send(ctx, srv.Client(), q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	handler := b.handler(t, nil)
	var mu sync.Mutex
	recv := map[string][]int{} // message id: the receive counts its handler saw
	blocked, release := 0, make(chan struct{})
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, Concurrency: 4, Prefetch: 4, Pollers: 1,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			mu.Lock()
			recv[m.ID] = append(recv[m.ID], m.ReceiveCount)
			first := len(recv) <= 4 && len(recv[m.ID]) == 1
			if first {
				blocked++
			}
			mu.Unlock()
			if first { // the first four wait in their handlers for the outage
				<-release
			}
			return handler.Handle(ctx, m)
		})})
	sqstest.WaitFor(t, time.Minute, "four handlers running and four messages prefetched", func() (bool, string) {
		mu.Lock()
		n := blocked
		mu.Unlock()
		st := w.State()
		return n == 4 && st.Held == 4, fmt.Sprintf("%d handlers, %d held", n, st.Held)
	})
	holdDown(t, pg, w, vis, func() { close(release) })
	up := time.Now()
	sqstest.WaitFor(t, 2*time.Minute, "every event processed", func() (bool, string) {
		n := b.count(t, `SELECT count(DISTINCT event_id) FROM `+b.schema+`.effects`)
		return n == len(ids), fmt.Sprintf("%d of %d", n, len(ids))
	})
	t.Logf("all %d events processed %v after the database was back", len(ids), time.Since(up).Round(time.Millisecond))
	workertest.Stop(t, w)
	b.checkOnce(t, ids)
	if n, err := sqstest.Count(ctx, srv.Client(), q.DLQURL); err != nil || n != 0 {
		t.Errorf("the DLQ holds %d messages (%v), want none", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	again := 0
	for id, counts := range recv {
		if counts[len(counts)-1] > 1 {
			again++
			t.Logf("message %s: receive counts %v", id, counts)
		}
	}
	if srv.GoAws {
		t.Logf("GoAws reports every receive count as 1: the receive counts are not checked here")
		return
	}
	if again > 0 {
		t.Errorf("%d messages were received again in the outage, want none: the messages in hand were sent back", again)
	}
}

// ownedBundle starts a throwaway cluster of the test's own (its faults stop it) and sets up a
// bundle on it.
func ownedBundle(t *testing.T, name string) (*pgtest.Server, *bundle) {
	t.Helper()
	pg, err := pgtest.StartOwned(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	return pg, setupOn(t, pg.URL, nil)
}

// holdDown stops pg at once, calls stopped, waits for w to pause, and keeps the database down for
// 2.5 visibility timeouts (past two: without heartbeats the messages in hand would be visible
// again) before it starts it again.
func holdDown(t *testing.T, pg *pgtest.Server, w *worker.Worker, vis time.Duration, stopped func()) {
	t.Helper()
	if err := pg.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	stopped()
	sqstest.WaitFor(t, time.Minute, "the worker paused", func() (bool, string) { return w.State().Paused, "" })
	down := time.Now()
	sqstest.WaitFor(t, time.Minute, "the outage to last 2.5 visibility timeouts", func() (bool, string) {
		return time.Since(down) > 5*vis/2, ""
	})
	if err := pg.StartAgain(); err != nil {
		t.Fatal(err)
	}
}

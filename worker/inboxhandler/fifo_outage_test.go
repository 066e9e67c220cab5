package inboxhandler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// countingBatch is a BatchHandler that records the receive count of every message it is given,
// then hands the batch to the inbox handler.
type countingBatch struct {
	worker.BatchHandler
	mu     sync.Mutex
	counts map[string][]int // message id: the receive count of each call
}

func (c *countingBatch) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	c.mu.Lock()
	for i := range b.Len() {
		m := b.Message(i)
		c.counts[m.ID] = append(c.counts[m.ID], m.ReceiveCount)
	}
	c.mu.Unlock()
	return c.BatchHandler.HandleBatch(ctx, b)
}

// TestFIFOOutageKeepsGroupsInHand (PostgreSQL: a throwaway cluster of its own, stopped for longer
// than twice the visibility timeout; SQS: fauxqs, whose FIFO queues keep group order and locks;
// GoAws's do not): on a FIFO queue of four groups of four events, the group heads a worker holds
// when its database goes down (two inbox batches of two, running) are kept in hand, leased, through the outage: one probes at a time, and none is received a
// second time (maxReceiveCount 2: none reaches the DLQ). When the database is back every event
// has one effect, and each group's effects are written in the order sent. On the code before
// FIFO groups were parked, the heads were retried through SQS at each probe.
func TestFIFOOutageKeepsGroupsInHand(t *testing.T) {
	srv.Need(t, sqstest.FIFO)
	t.Parallel()
	ctx := t.Context()
	pg, b := ownedBundle(t, "fifo-outage")
	if _, err := b.pool.Exec(ctx, `ALTER TABLE `+b.schema+`.effects ADD COLUMN seq bigserial`); err != nil {
		t.Fatal(err)
	}
	const vis = 3 * time.Second
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "fifo-outage", FIFO: true, VisibilityTimeout: vis, MaxReceiveCount: 2})
	ids, all, msgs := fifoEvents(4, 4)
	if err := sqstest.Send(ctx, srv.Client(), q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	blocked, release := 0, make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // a failed wait must not leave the handlers blocked at the stop
	h := b.handler(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		mu.Lock()
		first := blocked < 2
		if first {
			blocked++
		}
		mu.Unlock()
		if first { // the first two wait in their transactions for the outage
			<-release
		}
		return b.effect(ctx, tx, m)
	})
	c := &countingBatch{BatchHandler: h, counts: map[string][]int{}}
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, Concurrency: 2, HandlerBatch: 2, Pollers: 1, Handler: c})
	sqstest.WaitFor(t, time.Minute, "two batches running", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return blocked == 2, fmt.Sprintf("%d handlers", blocked)
	})
	holdDown(t, pg, w, vis, releaseAll)
	sqstest.WaitFor(t, 2*time.Minute, "every event processed", func() (bool, string) {
		n := b.count(t, `SELECT count(DISTINCT event_id) FROM `+b.schema+`.effects`)
		return n == len(all), fmt.Sprintf("%d of %d", n, len(all))
	})
	workertest.Stop(t, w)
	b.checkOnce(t, all)
	order := b.effectOrder(t)
	for g, want := range ids {
		if !slices.Equal(order[g], want) {
			t.Errorf("group %s wrote its effects in the order %v, want %v", g, order[g], want)
		}
	}
	if n, err := sqstest.Count(ctx, srv.Client(), q.DLQURL); err != nil || n != 0 {
		t.Errorf("the DLQ holds %d messages (%v), want none", n, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	again := 0
	for id, counts := range c.counts {
		if slices.Max(counts) > 1 {
			again++
			t.Logf("message %s: receive counts %v", id, counts)
		}
	}
	if again > 0 {
		t.Errorf("%d messages were received again in the outage, want none: the group heads in hand were sent back", again)
	}
}

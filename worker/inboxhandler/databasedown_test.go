package inboxhandler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestDatabaseDown (fake SQS, real PostgreSQL that the test stops): while the database is
// down the pollers pause and probe with single messages, so the outage sends nothing to the DLQ;
// when it is back every event has exactly one effect. Not parallel: it stops the package's
// server.
func TestDatabaseDown(t *testing.T) {
	if !db.Owned() {
		t.Fatalf("this test stops PostgreSQL and needs the throwaway cluster; unset TEST_DATABASE_URL")
	}
	b := setup(t, nil)
	f := sqsfake.New()
	dlq := f.CreateQueue(sqsfake.QueueOptions{Name: "down-dlq", Retention: 14 * 24 * time.Hour})
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "down", DeadLetterQueue: dlq, MaxReceiveCount: 10})
	ids, msgs := events(200)
	if err := sqstest.Send(t.Context(), f, url, msgs); err != nil {
		t.Fatal(err)
	}
	met := &counters{}
	var w *worker.Worker
	started := make(chan struct{})
	release := make(chan struct{})
	handler := b.handler(t, nil)
	var once sync.Once
	w = workertest.Start(t, f, &worker.Config{QueueURL: url, Concurrency: 8, Metrics: met,
		Backoff: func(int) time.Duration { return 0 },
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			once.Do(func() { // the first handler waits for the database to go down
				close(started)
				<-release
			})
			return handler.Handle(ctx, m)
		}), Pollers: 1})
	<-started
	if err := db.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	close(release)
	before := receives(f, url)
	down := time.Now()
	sqstest.WaitFor(t, 20*time.Second, "4 s of outage", func() (bool, string) { return time.Since(down) > 4*time.Second, "" })
	during := receives(f, url) - before
	if err := db.StartAgain(); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitFor(t, 90*time.Second, "the queue drained", func() (bool, string) {
		return f.Len(url) == 0, fmt.Sprintf("%d left", f.Len(url))
	})
	workertest.Stop(t, w)
	b.checkOnce(t, ids)
	if n := f.Len(dlq); n != 0 {
		t.Errorf("%d messages in the DLQ after the outage", n)
	}
	// Without the pause, 8 slots with no backoff would receive thousands of times in 4 s.
	if during > 40 {
		t.Errorf("%d receives during a 4 s outage; the pollers did not pause", during)
	}
	t.Logf("%d receives during the outage", during)
}

func receives(f *sqsfake.Fake, url string) int {
	n := 0
	for _, m := range f.Messages(url) {
		n += m.ReceiveCount
	}
	return n
}

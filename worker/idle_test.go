package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// receivesInFlight is an *sqs.Client that counts its ReceiveMessage calls in flight.
type receivesInFlight struct {
	*sqs.Client
	n atomic.Int64
}

func (c *receivesInFlight) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.n.Add(1)
	defer c.n.Add(-1)
	return c.Client.ReceiveMessage(ctx, in, optFns...)
}

// TestIdleQueueOnePoller (the harness's SQS server: GoAws, or fauxqs): on an empty queue the
// sized pollers fall to one long poll (SQS bills each receive); messages bring them back to at
// least the default, and they fall to one again once the queue is empty.
func TestIdleQueueOnePoller(t *testing.T) {
	t.Parallel()
	const concurrency = 10
	minP := worker.DefaultPollers(concurrency, 1, worker.DefaultBatchSize)
	if minP < 2 {
		t.Fatalf("DefaultPollers(%d, 1, %d) = %d: the test needs at least 2", concurrency, worker.DefaultBatchSize, minP)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "idle"})
	c := &receivesInFlight{Client: newClient(t)}
	var handled atomic.Int64
	w, release, stop := sizedWorker(t, c, q.URL, concurrency, func(*worker.Message) bool { return true }, &handled)
	defer stop()
	ctx := t.Context()
	onePoll := func() (bool, string) {
		st := w.State()
		return st.Pollers == 1 && c.n.Load() <= 1, fmt.Sprintf("%d pollers, %d receives in flight", st.Pollers, c.n.Load())
	}
	sqstest.WaitFor(t, time.Minute, "one poller on the empty queue", onePoll)

	const n = 50
	msgs := make([]sqstest.Message, n)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: `{"id":"` + strconv.Itoa(i) + `"}`}
	}
	if err := sqstest.Send(ctx, newClient(t), q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	// The handlers hold what they took: the rest stays in the queue, and no receive comes back
	// empty until they are released.
	sqstest.WaitFor(t, time.Minute, "the pollers back", func() (bool, string) {
		st := w.State()
		return st.Pollers >= minP, fmt.Sprintf("%d pollers, want at least %d", st.Pollers, minP)
	})
	release()
	sqstest.WaitFor(t, 2*time.Minute, "every message handled", func() (bool, string) {
		return handled.Load() >= n, fmt.Sprintf("%d of %d handled", handled.Load(), n)
	})
	sqstest.WaitFor(t, time.Minute, "one poller on the drained queue", onePoll)
}

// TestLightLoadTwoPollers (the harness's SQS server: GoAws, or fauxqs): while messages arrive a
// few at a time, so that each receive comes back with what arrived since the one before, the
// sized pollers fall to two (more would only split the arrivals into more receives, each billed),
// and a backlog brings them back to at least the default.
func TestLightLoadTwoPollers(t *testing.T) {
	t.Parallel()
	const concurrency = 100
	minP := worker.DefaultPollers(concurrency, 1, worker.DefaultBatchSize)
	if minP <= 2 {
		t.Fatalf("DefaultPollers(%d, 1, %d) = %d: the test needs more than 2", concurrency, worker.DefaultBatchSize, minP)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "light"})
	var handled atomic.Int64
	// The backlog's messages are held: the rest of it stays in the queue while the pollers grow.
	backlog := func(m *worker.Message) bool { return strings.HasPrefix(string(m.Body), `{"backlog"`) }
	w, release, stop := sizedWorker(t, newClient(t), q.URL, concurrency, backlog, &handled)
	defer stop()
	ctx := t.Context()
	// A trickle: one message every 20 ms (a light load, not a wait for anything) until the
	// pollers are down to two.
	sender := newClient(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(time.Minute)
	for i := 0; w.State().Pollers != 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of a message every 20 ms (%d handled): %d pollers, want 2", handled.Load(), w.State().Pollers)
		}
		if err := sqstest.Send(ctx, sender, q.URL, []sqstest.Message{{Body: `{"trickle":"` + strconv.Itoa(i) + `"}`}}); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
	msgs := make([]sqstest.Message, 400)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: `{"backlog":"` + strconv.Itoa(i) + `"}`}
	}
	if err := sqstest.Send(ctx, sender, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitFor(t, time.Minute, "the pollers back for the backlog", func() (bool, string) {
		st := w.State()
		return st.Pollers >= minP, fmt.Sprintf("%d pollers, want at least %d", st.Pollers, minP)
	})
	release()
}

// sizedWorker starts a worker of concurrency runners, its pollers sized by the worker, on
// queueURL through c. Its handler counts each message in handled, after waiting for release if
// hold says so. stop releases the held messages (once) and stops the worker; defer it.
func sizedWorker(t *testing.T, c worker.SQSClient, queueURL string, concurrency int, hold func(*worker.Message) bool,
	handled *atomic.Int64) (w *worker.Worker, release, stop func()) {
	t.Helper()
	ch := make(chan struct{})
	release = sync.OnceFunc(func() { close(ch) })
	w = workertest.Start(t, c, &worker.Config{QueueURL: queueURL, WaitTime: time.Second, Concurrency: concurrency,
		Logger: sqstest.Logger(t),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if hold(m) {
				select {
				case <-ch:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			handled.Add(1)
			return nil
		})})
	return w, release, func() {
		release()
		workertest.Stop(t, w)
	}
}

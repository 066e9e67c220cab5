package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/reqcount"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// receiveCall is one ReceiveMessage call as receiveLog saw it.
type receiveCall struct {
	start, end time.Time
	asked, got int
}

// receiveLog is an *sqs.Client that records each ReceiveMessage call: when it was sent and
// answered, how many messages it asked for and how many came. Every call goes to the server.
type receiveLog struct {
	*sqs.Client
	mu       sync.Mutex
	calls    []receiveCall
	inFlight atomic.Int64
}

func (c *receiveLog) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	start := time.Now()
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	call := receiveCall{start: start, end: time.Now(), asked: int(in.MaxNumberOfMessages)}
	if err == nil {
		call.got = len(out.Messages)
	}
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
	return out, err
}

func (c *receiveLog) snapshot() []receiveCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]receiveCall(nil), c.calls...)
}

// TestReceiveLingerAfterAPartialReceive (the harness's SQS server): after a receive that brought
// fewer messages than it asked for, the poller waits for the rest of a batch to arrive, at the rate
// its last receive saw and at most Config.ReceiveLinger, before it receives again. With one
// poller, a receive that brought 1 of 10 after d is followed by the next no sooner than
// min(ReceiveLinger, 9 × c) after it, c being the poller's cycle (from the send of its last
// receive that brought messages, or the call's own time for the first): lingerCycle bounds it
// from below with the times taken here, around the calls.
func TestReceiveLingerAfterAPartialReceive(t *testing.T) {
	t.Parallel()
	const linger = 300 * time.Millisecond
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "linger"})
	c := &receiveLog{Client: newClient(t)}
	var handled atomic.Int64
	w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: 2 * time.Second, Pollers: 1, Concurrency: 1,
		ReceiveLinger: linger, Logger: sqstest.Logger(t),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { handled.Add(1); return nil })})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	// Messages one at a time, each once the last is handled: every receive that brings one
	// asked for more.
	const n = 3
	for i := range n {
		sqstest.WaitFor(t, time.Minute, "a receive waiting", func() (bool, string) {
			return c.inFlight.Load() == 1, fmt.Sprintf("%d receives in flight", c.inFlight.Load())
		})
		if err := sqstest.Send(ctx, newClient(t), q.URL, []sqstest.Message{{Body: `{"n":` + strconv.Itoa(i) + `}`}}); err != nil {
			t.Fatal(err)
		}
		sqstest.WaitFor(t, time.Minute, "the message handled", func() (bool, string) {
			return handled.Load() == int64(i+1), fmt.Sprintf("%d of %d handled", handled.Load(), i+1)
		})
	}
	sqstest.WaitFor(t, time.Minute, "the receive after the last message", func() (bool, string) {
		calls := c.snapshot()
		return len(calls) > 0 && calls[len(calls)-1].got == 0 || c.inFlight.Load() == 1, fmt.Sprintf("%d receives", len(calls))
	})
	calls := c.snapshot()
	checked := 0
	for i, call := range calls[:len(calls)-1] {
		if call.got == 0 || call.got >= call.asked {
			continue
		}
		next := calls[i+1]
		d := call.end.Sub(call.start)
		want := min(linger, lingerCycle(calls, i)*time.Duration(call.asked-call.got)/time.Duration(call.got))
		if gap := next.start.Sub(call.end); gap < want {
			t.Errorf("receive %d brought %d of %d after %v; the next came %v later, want at least %v", i, call.got, call.asked, d, gap, want)
		}
		checked++
	}
	if checked < n-1 {
		t.Fatalf("%d receives brought fewer messages than they asked for and had one after them; want at least %d (%+v)", checked, n-1, calls)
	}
}

// lingerCycle is a lower bound, from the times taken around the calls, of the cycle the poller
// measured for receive i: from the send of the last receive before it that brought messages to
// its own send (at least from that call's start to the end of the call before i), or, with none
// before it, the call's own time.
func lingerCycle(calls []receiveCall, i int) time.Duration {
	for j := i - 1; j >= 0; j-- {
		if calls[j].got > 0 {
			return calls[i-1].end.Sub(calls[j].start)
		}
	}
	return calls[i].end.Sub(calls[i].start)
}

// TestBacklogReceivesFullBatches (the harness's SQS server): on a backlog, where the handlers
// free the slots a few at a time and several pollers wait for them, the pollers take the slots
// in turn, so that the receives ask for full batches (ten) and not for the few slots free when
// each asked: a backlog costs one receive per ten messages.
func TestBacklogReceivesFullBatches(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "fullbatch"})
	const n = 400
	msgs := make([]sqstest.Message, n)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: `{"id":"` + strconv.Itoa(i) + `"}`}
	}
	ctx := t.Context()
	if err := sqstest.Send(ctx, newClient(t), q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	c := &receiveLog{Client: newClient(t)}
	var handled atomic.Int64
	w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Pollers: 4, Concurrency: 4, Prefetch: 20,
		Logger:  sqstest.Logger(t),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { handled.Add(1); return nil })})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	sqstest.WaitFor(t, 2*time.Minute, "every message handled", func() (bool, string) {
		return handled.Load() >= n, fmt.Sprintf("%d of %d handled", handled.Load(), n)
	})
	asked, got, calls := 0, 0, 0
	for _, call := range c.snapshot() {
		if call.got == 0 {
			continue
		}
		asked, got, calls = asked+call.asked, got+call.got, calls+1
	}
	t.Logf("%d receives brought %d messages; they asked for %.1f on average", calls, got, float64(asked)/float64(calls))
	// Taken in turn, 10.0 on a quiet machine and 8.7-9.9 under two CPU burners (a poller that
	// waited gatherWait for slots a descheduled handler holds receives for fewer); without the
	// turns, 6.8-7.5 on a quiet machine.
	if float64(asked) < 8*float64(calls) {
		t.Fatalf("the receives that brought messages asked for %.1f on average; want at least 8 of 10", float64(asked)/float64(calls))
	}
}

// TestRequestCountersMatchTheWire (the harness's SQS server): the worker's request counters
// (SQSRequests and its kinds) equal what a counting HTTP client under the SDK client saw on the
// wire, for a drain with a failure (a visibility change) and idle long polls at the end: no call
// goes around the counters, and none is counted twice.
func TestRequestCountersMatchTheWire(t *testing.T) {
	t.Parallel()
	const n = 30
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "reqcounters"})
	if err := sqstest.Send(t.Context(), srv.Client(), q.URL, bodies(n, "m-")); err != nil {
		t.Fatal(err)
	}
	rc := reqcount.NewTransport(16)
	c, err := srv.NewClient(context.Background(), func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMetrics()
	var failed atomic.Bool
	w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: m, Logger: sqstest.Logger(t),
		Backoff: func(int) time.Duration { return 0 },
		Handler: worker.HandlerFunc(func(_ context.Context, msg *worker.Message) error {
			if string(msg.Body) == "m-0" && failed.CompareAndSwap(false, true) {
				return errors.New("fails once")
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Every message deleted, then an empty receive: the drain is over and the pollers idle.
	sqstest.WaitFor(t, time.Minute, "the drain and an empty receive", func() (bool, string) {
		d, e := m.get(worker.Deleted), m.get(worker.EmptyReceives)
		return d == n && e > 0, fmt.Sprintf("deleted %d of %d, %d empty receives", d, n, e)
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	wire := rc.Snapshot()
	for _, k := range []struct {
		c    worker.Counter
		want int64
	}{
		{worker.SQSRequests, wire.Total()},
		{worker.ReceiveRequests, wire.By["ReceiveMessage"]},
		{worker.EmptyReceives, wire.EmptyReceives},
		{worker.DeleteRequests, wire.By["DeleteMessage"] + wire.By["DeleteMessageBatch"]},
		{worker.VisibilityRequests, wire.By["ChangeMessageVisibility"] + wire.By["ChangeMessageVisibilityBatch"]},
	} {
		if got := int64(m.get(k.c)); got != k.want {
			t.Errorf("%s: the worker counted %d, the wire saw %d (all: %v)", k.c, got, k.want, wire.By)
		}
	}
	if m.get(worker.VisibilityRequests) < 1 || m.get(worker.DeleteRequests) < 3 || m.get(worker.ReceiveRequests) < 4 {
		t.Errorf("counted %d visibility changes, %d deletes, %d receives; want at least 1, 3 and 4 for %d messages and a failure",
			m.get(worker.VisibilityRequests), m.get(worker.DeleteRequests), m.get(worker.ReceiveRequests), n)
	}
}

// shortPolls is an *sqs.Client whose long polls the server answers at once: it sends each
// ReceiveMessage with WaitTimeSeconds 0, as a server or proxy that cuts long polls short would
// have them answered (fauxqs answers every waiting long poll, empty, when one message arrives).
type shortPolls struct{ receiveLog }

func (c *shortPolls) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	cp := *in
	cp.WaitTimeSeconds = 0
	return c.receiveLog.ReceiveMessage(ctx, &cp, optFns...)
}

// TestEarlyEmptyReceivesDoNotSpin (the harness's SQS server, an empty queue, long polls answered
// at once by shortPolls): a poller whose long polls come back empty well before their wait time,
// with no message received meanwhile, waits before it receives again, ReceiveLinger and then
// longer, instead of sending a request as fast as the server answers. With one poller, the first
// such receive is retried at once (on fauxqs it means a message arrived for another poller) and
// each one after it waits at least ReceiveLinger, twice as long each time.
func TestEarlyEmptyReceivesDoNotSpin(t *testing.T) {
	t.Parallel()
	const linger = 100 * time.Millisecond
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "earlyempty"})
	c := &shortPolls{receiveLog{Client: newClient(t)}}
	w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: 5 * time.Second, Pollers: 1, Concurrency: 1,
		ReceiveLinger: linger, Logger: sqstest.Logger(t),
		Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	sqstest.WaitFor(t, time.Minute, "five receives", func() (bool, string) {
		n := len(c.snapshot())
		return n >= 5, fmt.Sprintf("%d receives", n)
	})
	calls := c.snapshot()[:5]
	want := linger
	for i := 2; i < len(calls); i++ {
		if calls[i].got != 0 || calls[i-1].got != 0 {
			t.Fatalf("receive %d brought a message from an empty queue", i)
		}
		if gap := calls[i].start.Sub(calls[i-1].end); gap < want {
			t.Errorf("receive %d started %v after the empty one before it ended; want at least %v", i, gap, want)
		}
		want *= 2
	}
}

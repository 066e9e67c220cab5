package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/semaphore"

	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// A runner's buffer can come back from holdBack (during a pause) with more capacity than
// HandlerBatch; the next batch must still stop at HandlerBatch. CI once panicked here, slicing the
// outcome array to 16 with a batch of 10. No SQS server: gather reads the ready queue only.
func TestGatherStopsAtHandlerBatch(t *testing.T) {
	t.Parallel()
	w := &Worker{ready: make(chan item, 32), cfg: Config{Linger: time.Millisecond}}
	for range 32 {
		w.ready <- item{d: &delivery{m: &Message{}}}
	}
	var timer *time.Timer
	buf := make([]*delivery, 0, 16) // as holdBack's appends leave it
	for range 3 {
		var open bool
		buf, _, open = w.gather(buf[:0], 10, nil, &timer)
		if !open || len(buf) != 10 {
			t.Fatalf("gather = %d messages (open %v), want 10", len(buf), open)
		}
	}
	// Two left: a short batch once Linger passes.
	buf, _, _ = w.gather(buf[:0], 10, nil, &timer)
	if len(buf) != 2 {
		t.Fatalf("last gather = %d messages, want 2", len(buf))
	}
}

// TestNotStartedHaltsItsGroupInABatch (fake, for the receive and the releases): a FIFO group
// m0..m3 from one receive is one batch, and m2 does not start: a refused SNS envelope, a lease
// lost while it waited, or a message held past MaxHold. m0 and m1 run; m3 must not overtake m2:
// it is not run and is released to the queue. The batch is built by hand, so that each case is
// exact (a server decides none of them).
func TestNotStartedHaltsItsGroupInABatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spoil func(d *delivery)
	}{
		{"refused-envelope", func(d *delivery) { d.refused = fmt.Errorf("%w: test", ErrSNSEnvelope) }},
		{"lease-lost", func(d *delivery) { d.lease.mu.Lock(); d.lease.lost = ErrLeaseLost; d.lease.mu.Unlock() }},
		{"held-too-long", func(d *delivery) { d.lease.mu.Lock(); d.lease.lost = errHeldTooLong; d.lease.mu.Unlock() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := sqsfake.New()
			url := f.CreateQueue(sqsfake.QueueOptions{Name: tc.name + ".fifo"})
			for i := range 4 {
				if _, err := f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(fmt.Sprint("m", i)),
					MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(fmt.Sprint(i))}); err != nil {
					t.Fatal(err)
				}
			}
			requested := time.Now()
			out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
				MessageSystemAttributeNames: receiveAttributes})
			if err != nil || len(out.Messages) != 4 {
				t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			cfg := &Config{HandlerTimeout: time.Minute, Backoff: func(int) time.Duration { return 0 }}
			w := &Worker{cfg: *cfg, log: log}
			e := &engine{cfg: cfg, metrics: nopMetrics{}, log: log, now: time.Now, vis: time.Minute, slots: semaphore.NewWeighted(4)}
			w.e = e
			e.work = ctx
			e.sw = &sqsWriter{client: f, opt: PlainRequestBodies, url: url, fifo: true, metrics: nopMetrics{}, log: log, base: context.Background()}
			e.del = newDeleter(e.sw, time.Millisecond, 10)
			if err := e.slots.Acquire(ctx, 4); err != nil { // the receive's slots
				t.Fatal(err)
			}
			grp := &group{} // all four gathered into the batch
			ds := make([]*delivery, 4)
			for i := range ds {
				ds[i] = e.receive(&out.Messages[i], requested, time.Now())
				ds[i].group, ds[i].pos = grp, i
				ds[i].take(time.Now())
			}
			tc.spoil(ds[2])
			var ran []string
			bh := batchFunc(func(_ context.Context, b *Batch) []error {
				res := make([]error, b.Len())
				for i := range b.Len() {
					res[i] = b.Run(b.Context(i), i, func(context.Context) error {
						ran = append(ran, string(b.Message(i).Body))
						return nil
					})
				}
				return res
			})
			w.processBatch(bh, ds)
			e.del.close()
			for _, d := range ds {
				d.lease.stop()
			}
			if fmt.Sprint(ran) != "[m0 m1]" {
				t.Errorf("ran %v; want [m0 m1]", ran)
			}
			if st := f.Messages(url); !st[0].Deleted || !st[1].Deleted || st[3].InFlight || st[3].Deleted {
				t.Errorf("messages %+v: want m0 and m1 deleted, m3 released to the queue", st)
			}
			if !e.slots.TryAcquire(4) { // every delivery ended, once
				t.Error("the deliveries did not give their slots back")
			}
		})
	}
}

// batchFunc is a BatchHandler of a function.
type batchFunc func(ctx context.Context, b *Batch) []error

func (f batchFunc) Handle(context.Context, *Message) error { return errors.New("not batched") }
func (f batchFunc) HandleBatch(ctx context.Context, b *Batch) []error {
	return f(ctx, b)
}

// TestSizerFeed (no server): the pollers grow past what Little's law asks for while the receives
// come back full and the runners have less than half a round of batches waiting, stay while less
// than a round waits, and fall back to the law's count once a whole round waits; receives that
// come back short (no backlog) never grow them, and those less than half full on average (a light
// load) let them fall to the floor; a growth that did not raise the receive rate by a tenth is
// the last until the rate rises past that, and feed adds none past 4 rounds on their way. And the
// round trip they are sized from is the
// fastest receive, drifting up 1% a look.
func TestSizerFeed(t *testing.T) {
	t.Parallel()
	s := &sizer{crew: crew{handler: 10, batch: 10}}
	s.pollers.Store(8)
	for _, tc := range []struct {
		name              string
		floor             int
		calls, msgs, held int64
		want              int
	}{
		{"full, runners short", 4, 10, 100, 20, 9},
		{"full, runners short, law asks more", 20, 10, 100, 20, 20},
		{"half-full receives", 4, 10, 60, 0, 8},
		{"short receives (a light load): down to the floor", 2, 10, 40, 0, 2},
		{"half a round waiting", 4, 10, 100, 60, 8},
		{"a round waiting", 4, 10, 100, 100, 4},
		{"a round waiting, law asks more", 12, 10, 100, 100, 12},
	} {
		if got := s.feed(tc.floor, 10, tc.calls, tc.msgs, tc.held, 0); got != tc.want {
			t.Errorf("%s: feed = %d, want %d", tc.name, got, tc.want)
		}
	}
	// A growth that did not raise the receive rate by a tenth is the last until it rises past
	// that: the server is the limit, and more pollers would only hold more messages.
	s.pollers.Store(8)
	for i, tc := range []struct {
		rate float64
		want int
	}{{1000, 9}, {1050, 8}, {1090, 8}, {1200, 9}, {1300, 8}} {
		if got := s.feed(4, 10, 10, 100, 20, tc.rate); got != tc.want {
			t.Errorf("look %d, %v messages received a second: feed = %d, want %d", i, tc.rate, got, tc.want)
		}
	}
	// At most feedRounds rounds on their way: 8 pollers of 10 for 2 runners of 10 is 4 rounds.
	s.fedRate = 0
	if got := s.feed(4, 2, 10, 100, 5, 0); got != 8 {
		t.Errorf("4 rounds on their way: feed = %d, want 8 (no more)", got)
	}
	if got := s.feed(12, 2, 10, 100, 5, 0); got != 12 {
		t.Errorf("4 rounds on their way, law asks more: feed = %d, want 12", got)
	}
	if got := s.feed(4, 10, 10, 100, 100, 1300); got != 4 {
		t.Errorf("a round waiting after a growth stopped: feed = %d, want 4", got)
	}
	if got := s.feed(4, 10, 10, 100, 20, 500); got != 9 {
		t.Errorf("the runners short again, at a lower rate: feed = %d, want 9 (a new episode grows)", got)
	}
	s.receiveTook(30*time.Millisecond, 10)
	s.receiveTook(20*time.Millisecond, 10)
	s.receiveTook(40*time.Millisecond, 10)
	if got := s.roundTrip(); got != 0.020 {
		t.Fatalf("roundTrip = %v, want the fastest, 0.020", got)
	}
	if got := s.roundTrip(); got < 0.0201 || got > 0.02021 {
		t.Fatalf("roundTrip with no receive since = %v, want 1%% more, 0.0202", got)
	}
}

// earlyEmptyWait waits only after an empty long poll that came back before half its wait time,
// doubling for each such one in a row up to maxEarlyEmptyWait, and never when ReceiveLinger is off
// or the worker short-polls. No SQS server.
func TestEarlyEmptyWait(t *testing.T) {
	t.Parallel()
	const limit = 50 * time.Millisecond
	for _, c := range []struct {
		waitTime, took time.Duration
		want           bool
	}{
		{20 * time.Second, time.Millisecond, true},                   // answered at once
		{20 * time.Second, 9 * time.Second, true},                    // well before the wait time
		{20 * time.Second, 10 * time.Second, false},                  // half the wait time
		{20 * time.Second, 20*time.Second + time.Millisecond, false}, // waited out: an idle queue
		{-1, time.Millisecond, false},                                // short polls (their own idle sleep)
	} {
		if got := earlyEmpty(c.waitTime, c.took); got != c.want {
			t.Errorf("earlyEmpty(%v, %v) = %v, want %v", c.waitTime, c.took, got, c.want)
		}
	}
	for _, c := range []struct {
		limit  time.Duration
		before int
		want   time.Duration
	}{
		{limit, 1, limit},                // the second in a row
		{limit, 2, 2 * limit},            // the third
		{limit, 4, 8 * limit},            // the fifth
		{limit, 1000, maxEarlyEmptyWait}, // capped
		{-1, 1, DefaultReceiveLinger},    // ReceiveLinger off: the guard still waits
	} {
		if got := earlyEmptyWait(c.limit, c.before); got != c.want {
			t.Errorf("earlyEmptyWait(%v, %d) = %v, want %v", c.limit, c.before, got, c.want)
		}
	}
	// A row of early empty receives: the first never waits; the next ones wait, doubling, while
	// no poller gets a message (lastGot stays 7); one that did (lastGot 9) starts the row again.
	var e earlyEmpties
	for i, c := range []struct {
		got  int64
		want time.Duration
	}{{7, 0}, {7, limit}, {7, 2 * limit}, {7, 4 * limit}, {9, 0}, {9, limit}, {12, 0}, {13, 0}, {13, limit}} {
		if d := e.wait(limit, c.got); d != c.want {
			t.Errorf("early empty %d (lastGot %d): wait %v, want %v", i, c.got, d, c.want)
		}
	}
	e.n = 0 // a receive that was not early and empty
	if d := e.wait(limit, 13); d != 0 {
		t.Errorf("the first early empty after another receive waits %v, want 0", d)
	}
}

// TestMustWaitKeepsWhatThePauseKept (no server: mustWait reads the deliveries only): a FIFO
// runner keeps its batch through a pause when it holds a message received before the pause began,
// or one kept in it already: a probe received in the pause that failed and was parked must wait
// for the next probe's turn, not run again at once. A probe, and a message received in the
// pause, run.
func TestMustWaitKeepsWhatThePauseKept(t *testing.T) {
	t.Parallel()
	since := time.Now()
	before, after := since.Add(-time.Second), since.Add(time.Second)
	for _, tc := range []struct {
		name string
		d    delivery
		want bool
	}{
		{"received before the pause", delivery{m: &Message{Received: before}}, true},
		{"received in the pause", delivery{m: &Message{Received: after}}, false},
		{"received in the pause, then parked", delivery{m: &Message{Received: after}, kept: true}, true},
		{"the probe", delivery{m: &Message{Received: before}, kept: true, probe: true}, false},
	} {
		if got := mustWait([]*delivery{&tc.d}, since); got != tc.want {
			t.Errorf("%s: mustWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}

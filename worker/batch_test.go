package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// Tests of the worker's batches (BatchHandler) and prefetch, on the in-process fake: the batch
// boundaries and held messages they look at are the worker's own, which no server shows.

// batchRecorder is a BatchHandler that runs each message through Batch.Run and records the
// batches and the order of the messages it ran. fail says which bodies fail (an error, or a
// panic for "panic"); FIFO halting is its own job, as for any batch handler.
type batchRecorder struct {
	mu      sync.Mutex
	sizes   []int
	ran     []string
	fail    func(body string, attempt int) string
	attempt map[string]int
}

func (r *batchRecorder) Handle(context.Context, *worker.Message) error {
	return errors.New("Handle called on a batch handler")
}

func (r *batchRecorder) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	res := make([]error, b.Len())
	halted := map[string]bool{}
	r.mu.Lock()
	r.sizes = append(r.sizes, b.Len())
	r.mu.Unlock()
	for i := range b.Len() {
		m := b.Message(i)
		if m.GroupID != "" && halted[m.GroupID] {
			res[i] = worker.ErrNotRun
			continue
		}
		res[i] = b.Run(b.Context(i), i, func(ctx context.Context) error {
			r.mu.Lock()
			if r.attempt == nil {
				r.attempt = map[string]int{}
			}
			r.attempt[string(m.Body)]++
			n := r.attempt[string(m.Body)]
			r.mu.Unlock()
			how := ""
			if r.fail != nil {
				how = r.fail(string(m.Body), n)
			}
			switch how {
			case "panic":
				panic("boom " + string(m.Body))
			case "error":
				return errors.New("failed " + string(m.Body))
			}
			r.mu.Lock()
			r.ran = append(r.ran, string(m.Body))
			r.mu.Unlock()
			return nil
		})
		if res[i] != nil && m.GroupID != "" {
			halted[m.GroupID] = true
		}
	}
	return res
}

func (r *batchRecorder) snapshot() ([]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sizes), slices.Clone(r.ran)
}

// TestBatches: 40 messages with one runner and HandlerBatch 10 run in batches of more than
// one, every message once, one failing and one panicking message retried alone, and the batch
// counters add up.
func TestBatches(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(40, "m"))
		met := newTestMetrics()
		r := &batchRecorder{fail: func(body string, n int) string {
			switch {
			case body == "m7" && n == 1:
				return "error"
			case body == "m13" && n == 1:
				return "panic"
			}
			return ""
		}}
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, Metrics: met,
			Backoff: func(int) time.Duration { return 0 }, Handler: r})
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		sizes, ran := r.snapshot()
		if len(ran) != 40 {
			t.Fatalf("%d messages ran to success, want 40", len(ran))
		}
		slices.Sort(ran)
		if len(slices.Compact(ran)) != 40 {
			t.Fatalf("a message ran twice: %v", ran)
		}
		if slices.Max(sizes) < 2 || slices.Max(sizes) > 10 {
			t.Errorf("batch sizes %v: want batches of 2 to 10", sizes)
		}
		total := 0
		for _, s := range sizes {
			total += s
		}
		if met.get(worker.Batches) != len(sizes) || met.get(worker.BatchedMessages) != total || total != 42 {
			t.Errorf("counters batches %d, batched %d; the handler saw %d batches of %d messages (want 42: 40 and 2 retries)",
				met.get(worker.Batches), met.get(worker.BatchedMessages), len(sizes), total)
		}
		if met.get(worker.Failed) != 2 || met.get(worker.Processed) != 40 || met.get(worker.Deleted) != 40 {
			t.Errorf("failed %d, processed %d, deleted %d; want 2, 40, 40", met.get(worker.Failed), met.get(worker.Processed), met.get(worker.Deleted))
		}
	})
}

// TestBatchFIFOOrder: one FIFO group of 10 in one receive, batches of 4: the group runs in
// order across batches; when m3 fails once, the rest of its batch and of its group is released,
// not run, and the group resumes at m3.
func TestBatchFIFOOrder(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo"})
		var msgs []sqstest.Message
		for i := range 10 {
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprint("m", i), GroupID: "g"})
		}
		b.send(t, msgs)
		met := newTestMetrics()
		r := &batchRecorder{fail: func(body string, n int) string {
			if body == "m3" && n == 1 {
				return "error"
			}
			return ""
		}}
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, HandlerBatch: 4, Metrics: met,
			Backoff: func(int) time.Duration { return 0 }, Handler: r})
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		sizes, ran := r.snapshot()
		want := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}
		if !slices.Equal(ran, want) {
			t.Fatalf("ran %v, want %v", ran, want)
		}
		if slices.Max(sizes) > 4 {
			t.Errorf("batch sizes %v, want at most 4", sizes)
		}
		if met.get(worker.Released) == 0 {
			t.Error("nothing released after m3 failed: the rest of its group should have been")
		}
	})
}

// TestBatchPanicInHandleBatch: a HandleBatch that panics fails every message of its batch;
// the worker keeps running and the messages come back.
func TestBatchPanicInHandleBatch(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(5, "m"))
		var mu sync.Mutex
		calls := 0
		h := &funcBatch{fn: func(ctx context.Context, bt *worker.Batch) []error {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if first {
				panic("batch bug")
			}
			return make([]error, bt.Len())
		}}
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, Metrics: met,
			Backoff: func(int) time.Duration { return 0 }, Handler: h})
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		if f := met.get(worker.Failed); f < 1 {
			t.Errorf("%d failed after a panicking batch", f)
		}
		if met.get(worker.Processed) != 5 {
			t.Errorf("processed %d, want 5", met.get(worker.Processed))
		}
	})
}

type funcBatch struct {
	fn func(ctx context.Context, b *worker.Batch) []error
}

func (f *funcBatch) Handle(context.Context, *worker.Message) error { return errors.New("not batched") }
func (f *funcBatch) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	return f.fn(ctx, b)
}

// TestHeldTooLongReleased (every server; the receive count where it counts): one handler busy, Prefetch 1, MaxHold 1 s: the held message is
// released to the queue once it has waited MaxHold (checked at its heartbeat), never run by this
// holder, and runs later from a new receive.
func TestHeldTooLongReleased(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second})
		b.send(t, bodies(2, "m"))
		release := make(chan struct{})
		met := newTestMetrics()
		var mu sync.Mutex
		var seen []string
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, Prefetch: 1, MaxHold: time.Second,
			Metrics: met, Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				first := len(seen) == 0
				seen = append(seen, fmt.Sprintf("%s#%d", m.Body, m.ReceiveCount))
				mu.Unlock()
				if first {
					<-release
				}
				return nil
			})})
		sqstest.WaitFor(t, 20*time.Second, "the held message released", func() (bool, string) {
			return met.get(worker.Released) >= 1, fmt.Sprint(met.get(worker.Released))
		})
		close(release)
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || s.has(sqstest.ReceiveCount) && !strings.HasSuffix(seen[1], "#2") {
			t.Errorf("runs %v: want 2, the held one on its second receive", seen)
		}
	})
}

// TestHeldOnLastReceiveKept (every server): a message held on its last receive (maxReceiveCount
// 1, so the first receive is the last on every server) is not released at MaxHold, which would
// dead-letter it unrun: one handler busy past MaxHold (four heartbeats, a second apart), Prefetch
// 1, MaxHold 1 s; the held message is never released and runs once (released, the queue would
// have moved it to the DLQ at its next receive).
func TestHeldOnLastReceiveKept(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second, MaxReceiveCount: 1})
		b.send(t, bodies(2, "m"))
		release := make(chan struct{})
		met := newTestMetrics()
		var mu sync.Mutex
		var seen []string
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, Prefetch: 1, MaxHold: time.Second,
			Metrics: met, Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				first := len(seen) == 0
				seen = append(seen, string(m.Body))
				mu.Unlock()
				if first {
					<-release
				}
				return nil
			})})
		sqstest.WaitFor(t, 30*time.Second, "two messages in hand and four heartbeats (past MaxHold)", func() (bool, string) {
			return met.get(worker.Received) == 2 && met.get(worker.Heartbeats) >= 4,
				fmt.Sprintf("received %d, heartbeats %d", met.get(worker.Received), met.get(worker.Heartbeats))
		})
		if n := met.get(worker.Released); n != 0 {
			t.Errorf("%d released on their last receive: dead-lettered without running", n)
		}
		close(release)
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 {
			t.Errorf("runs %v: want both messages, once each", seen)
		}
	})
}

// TestConfigBatchRefusals: HandlerBatch over the cap or on a plain handler, Linger too long.
func TestConfigBatchRefusals(t *testing.T) {
	t.Parallel()
	plain := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	batch := &funcBatch{}
	for _, tc := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Handler: batch, HandlerBatch: 21}, "HandlerBatch is 21"},
		{worker.Config{Handler: plain, HandlerBatch: 2}, "does not implement BatchHandler"},
		{worker.Config{Handler: batch, Linger: time.Second}, "Linger is 1s"},
		{worker.Config{Handler: batch, ReceiveLinger: 2 * time.Second}, "ReceiveLinger is 2s"},
		{worker.Config{Handler: batch, MaxHold: -time.Second}, "MaxHold is -1s"},
	} {
		tc.cfg.QueueURL = "http://localhost/q"
		_, err := worker.New(sqsfake.New(), &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one with %q", tc.cfg, err, tc.want)
		}
	}
}

// TestPauseProbesPastAStuckHandler: one handler is stuck (it holds its slot) when the
// dependency goes down; the probes still run once the messages outstanding have had their
// bounded time to settle, so the pause ends when the dependency is back and the rest of the
// queue drains while the stuck handler still runs.
func TestPauseProbesPastAStuckHandler(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(20, "m"))
		release := make(chan struct{})
		defer close(release)
		var mu sync.Mutex
		stuck, down, done := "", true, map[string]bool{}
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, Prefetch: 2,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				if stuck == "" {
					stuck = string(m.Body)
					mu.Unlock()
					<-release
					return nil
				}
				if down {
					mu.Unlock()
					return worker.Unavailable(errors.New("database down"))
				}
				done[string(m.Body)] = true
				mu.Unlock()
				return nil
			})})
		sqstest.WaitFor(t, 20*time.Second, "the worker paused", func() (bool, string) { return w.State().Paused, "" })
		mu.Lock()
		down = false
		mu.Unlock()
		sqstest.WaitFor(t, 60*time.Second, "the other 19 messages processed while one handler is stuck", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == 19, fmt.Sprintf("%d done, paused %v", len(done), w.State().Paused)
		})
		release <- struct{}{}
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
	})
}

// TestBatchSizeAfterAPause: a pause releases the held messages received before it, which can
// empty a runner's whole batch; the batches after the pause must still fill up to HandlerBatch.
// (The runner once took its buffer's capacity as the batch size: a batch emptied by the pause
// left batches of one for good, and a batch of 9 or 10 kept through it panicked the runner.)
func TestBatchSizeAfterAPause(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		for _, fifo := range []bool{false, true} {
			t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
				if fifo {
					s.need(t, sqstest.FIFO)
				}
				t.Parallel()
				testBatchSizeAfterAPause(t, s, fifo)
			})
		}
	})
}

func testBatchSizeAfterAPause(t *testing.T, s *server, fifo bool) {
	o, msgs := sqsfake.QueueOptions{}, bodies(60, "m")
	if fifo {
		// Six groups of ten: a receive brings several groups, a batch holds several.
		o.Name = ".fifo"
		for i := range msgs {
			msgs[i].GroupID = fmt.Sprint("g", i%6)
		}
	}
	b := s.bundle(t, o)
	b.send(t, msgs)
	var (
		mu     sync.Mutex
		failed bool
		after  []int // sizes of the batches after the failed one
	)
	h := &funcBatch{fn: func(ctx context.Context, bt *worker.Batch) []error {
		res := make([]error, bt.Len())
		mu.Lock()
		first := !failed
		failed = true
		if !first {
			after = append(after, bt.Len())
		}
		mu.Unlock()
		for i := range bt.Len() {
			if first {
				res[i] = worker.Unavailable(errors.New("database down"))
				continue
			}
			res[i] = bt.Run(bt.Context(i), i, func(context.Context) error { return nil })
		}
		return res
	}}
	w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, Handler: h})
	b.waitDeleted(t, 60*time.Second)
	workertest.Stop(t, w)
	mu.Lock()
	defer mu.Unlock()
	if !failed || len(after) == 0 || slices.Max(after) < 2 {
		t.Fatalf("batch sizes after the pause %v: want batches of more than one", after)
	}
	if slices.Max(after) > 10 {
		t.Fatalf("batch sizes after the pause %v: want at most HandlerBatch (10)", after)
	}
}

// TestDefaultPollers: the default pollers keep about four full receives of running messages each,
// plus one, up to DefaultMaxPollers; a Config with Pollers 0 gets them.
func TestDefaultPollers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ c, n, b, want int }{
		{8, 10, 10, 3}, {2, 10, 10, 2}, {4, 1, 10, 2}, {1, 1, 1, 2}, {10, 1, 1, 4}, {64, 20, 10, worker.DefaultMaxPollers},
	} {
		if got := worker.DefaultPollers(tc.c, tc.n, tc.b); got != tc.want {
			t.Errorf("DefaultPollers(%d, %d, %d) = %d, want %d", tc.c, tc.n, tc.b, got, tc.want)
		}
	}
}

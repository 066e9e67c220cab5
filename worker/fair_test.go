package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// Fair queues: a standard queue whose messages carry a MessageGroupId (a tenant), and
// Config.MaxPerGroup. These tests need the group id returned on a standard queue
// (sqstest.FairGroups): neither GoAws nor fauxqs returns it, so they run on the in-process fake
// (worker/sqsfake) and on AWS. The cap is the worker's own: none of them relies on a server's
// fairness.

// groupCounter is a handler, plain or batched (batch), that runs fn on each message and counts
// the runners that hold each group's messages at once: a handler call of a plain handler, a
// HandleBatch call per group among its messages.
type groupCounter struct {
	fn func(ctx context.Context, m *worker.Message) error

	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	ran     map[string]int // the handler's runs of each body
}

func newGroupCounter(fn func(ctx context.Context, m *worker.Message) error) *groupCounter {
	return &groupCounter{fn: fn, running: map[string]int{}, most: map[string]int{}, ran: map[string]int{}}
}

func (c *groupCounter) enter(groups ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		c.running[g]++
		c.most[g] = max(c.most[g], c.running[g])
	}
}

func (c *groupCounter) leave(groups ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		c.running[g]--
	}
}

func (c *groupCounter) run(ctx context.Context, m *worker.Message) error {
	c.mu.Lock()
	c.ran[string(m.Body)]++
	c.mu.Unlock()
	return c.fn(ctx, m)
}

func (c *groupCounter) Handle(ctx context.Context, m *worker.Message) error {
	c.enter(m.GroupID)
	defer c.leave(m.GroupID)
	return c.run(ctx, m)
}

// mostAtOnce returns the most runners group g held at once.
func (c *groupCounter) mostAtOnce(g string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most[g]
}

func (c *groupCounter) runs(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ran[body]
}

// batched is c as a BatchHandler.
type batched struct{ *groupCounter }

func (b batched) HandleBatch(ctx context.Context, bt *worker.Batch) []error {
	var groups []string
	seen := map[string]bool{}
	for i := range bt.Len() {
		if g := bt.Message(i).GroupID; !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	b.enter(groups...)
	defer b.leave(groups...)
	res := make([]error, bt.Len())
	for i := range bt.Len() {
		m := bt.Message(i)
		res[i] = bt.Run(bt.Context(i), i, func(ctx context.Context) error { return b.run(ctx, m) })
	}
	return res
}

// handlerOf returns c as a plain handler or a batch handler, with the HandlerBatch to go with it.
func (c *groupCounter) handlerOf(batch bool) (worker.Handler, int) {
	if batch {
		return batched{c}, 10
	}
	return c, 0
}

func grouped(group string, n int) []sqstest.Message {
	out := bodies(n, group+"-")
	for i := range out {
		out[i].GroupID = group
	}
	return out
}

// TestMaxPerGroupCap: with MaxPerGroup 2 and eight runners, no group ever holds more than two
// runners at once (counted by the handler), with a plain handler and with batches of ten, and
// every message is processed.
func TestMaxPerGroupCap(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
				b := s.bundle(t, sqsfake.QueueOptions{})
				var msgs []sqstest.Message
				msgs = append(msgs, grouped("a", 120)...)
				msgs = append(msgs, grouped("b", 30)...)
				msgs = append(msgs, grouped("c", 30)...)
				b.send(t, msgs)
				c := newGroupCounter(func(context.Context, *worker.Message) error {
					time.Sleep(2 * time.Millisecond) // the work: messages of a group overlap
					return nil
				})
				h, hb := c.handlerOf(batch)
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 8, HandlerBatch: hb, MaxPerGroup: 2, Handler: h})
				b.waitDeleted(t, 60*time.Second)
				workertest.Stop(t, w)
				for _, g := range []string{"a", "b", "c"} {
					if n := c.mostAtOnce(g); n > 2 {
						t.Errorf("group %s held %d runners at once; MaxPerGroup is 2", g, n)
					}
				}
			})
		}
	})
}

// TestMaxPerGroupNoHeadOfLine: group a is at its cap (MaxPerGroup 1) with its one runner stuck
// and more of its messages waiting in the worker; group b's messages, sent after them, all run
// and are deleted while a's runner is still stuck, with a plain handler and with batches (a
// runner gathering a batch goes past a's waiting messages).
func TestMaxPerGroupNoHeadOfLine(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
				b := s.bundle(t, sqsfake.QueueOptions{})
				b.send(t, grouped("a", 20))
				stuck, release := make(chan struct{}), make(chan struct{})
				var once sync.Once
				c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
					if m.GroupID == "a" {
						once.Do(func() { close(stuck) })
						select {
						case <-release:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return nil
				})
				h, hb := c.handlerOf(batch)
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 4, HandlerBatch: hb, MaxPerGroup: 1, Handler: h})
				defer workertest.Stop(t, w)
				defer close(release)
				select {
				case <-stuck:
				case <-time.After(30 * time.Second):
					t.Fatal("no message of group a started")
				}
				sqstest.WaitFor(t, 30*time.Second, "a's other messages received and waiting", func() (bool, string) {
					st := w.State()
					return st.Held >= 5, fmt.Sprintf("held %d", st.Held)
				})
				b.send(t, grouped("b", 15))
				sqstest.WaitFor(t, 30*time.Second, "b's messages processed while a is stuck", func() (bool, string) {
					n := 0
					for i := range 15 {
						n += min(c.runs(fmt.Sprintf("b-%d", i)), 1)
					}
					return n == 15, fmt.Sprintf("%d of 15 ran", n)
				})
				if n := c.mostAtOnce("a"); n != 1 {
					t.Errorf("group a held %d runners at once; MaxPerGroup is 1", n)
				}
				if st := w.State().Groups; len(st) == 0 || st[0].Group != "a" || st[0].Runners != 1 || st[0].Waiting == 0 {
					t.Errorf("State().Groups = %+v; want a first, one runner, messages waiting", st)
				}
			})
		}
	})
}

// TestMaxPerGroupWaitingLeased (fake: a visibility timeout of one second, and receive counts):
// a message waiting behind its group's cap keeps its lease: its visibility is extended while it
// waits, so it is not delivered again, and it runs once, on its first receive.
func TestMaxPerGroupWaitingLeased(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups, sqstest.ReceiveCount, sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: time.Second})
		b.send(t, grouped("a", 2))
		release := make(chan struct{})
		var once sync.Once
		first := make(chan struct{})
		c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
			isFirst := false
			once.Do(func() { isFirst = true; close(first) })
			if isFirst {
				<-release
			}
			return nil
		})
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, MaxPerGroup: 1, Handler: c})
		select {
		case <-first:
		case <-time.After(30 * time.Second):
			t.Fatal("no message started")
		}
		began := time.Now()
		// Four visibility timeouts: a lease not extended would have lapsed, and the message been
		// received again, three times over.
		sqstest.WaitFor(t, 30*time.Second, "four visibility timeouts with both messages in flight, received once", func() (bool, string) {
			ms := b.f.Messages(b.url)
			for _, m := range ms {
				if !m.InFlight || m.ReceiveCount != 1 {
					t.Fatalf("after %v: %s in flight %v, received %d times; want in flight, received once", time.Since(began), m.Body, m.InFlight, m.ReceiveCount)
				}
			}
			return time.Since(began) >= 4*time.Second, fmt.Sprint(time.Since(began))
		})
		if st := w.State(); st.Held != 1 || st.InFlight != 1 {
			t.Errorf("held %d, in flight %d; want the capped message held and one running", st.Held, st.InFlight)
		}
		close(release)
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		for _, m := range b.f.Messages(b.url) {
			if m.ReceiveCount != 1 {
				t.Errorf("%s received %d times; want once (leased while it waited)", m.Body, m.ReceiveCount)
			}
		}
		for _, body := range []string{"a-0", "a-1"} {
			if n := c.runs(body); n != 1 {
				t.Errorf("%s ran %d times, want 1", body, n)
			}
		}
	})
}

// TestMaxPerGroupReceivesPastCappedGroup (fake; on AWS too): while a capped group's messages hold
// every slot (one runs, blocked; the others wait over the cap) and a runner is free, the worker
// still receives, so another group's message sent behind them runs on the free runner.
func TestMaxPerGroupReceivesPastCappedGroup(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, grouped("a", 5))
		b.send(t, grouped("b", 1))
		release := make(chan struct{})
		ranB := make(chan struct{})
		c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
			switch string(m.Body) {
			case "a-0":
				<-release
			case "b-0":
				close(ranB)
			}
			return nil
		})
		// Two runners and one message of prefetch: three slots, which a's messages fill.
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, Prefetch: 1, MaxPerGroup: 1, Handler: c})
		select {
		case <-ranB:
		case <-time.After(30 * time.Second):
			t.Errorf("b-0 did not run in 30 s while a-0 ran and a's other messages waited over the cap; state %+v", w.State())
		}
		close(release)
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		for _, body := range []string{"a-0", "a-1", "a-2", "a-3", "a-4", "b-0"} {
			if n := c.runs(body); n != 1 {
				t.Errorf("%s ran %d times, want 1", body, n)
			}
		}
	})
}

// TestFairQueueNoHalting: on a standard queue, group ids carry no FIFO rule: a message of group
// a that keeps failing does not hold a's other messages (they run once each, none released),
// with MaxPerGroup on and off, with a plain handler and with batches.
func TestFairQueueNoHalting(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		for _, maxPer := range []int{0, 1} {
			for _, batch := range []bool{false, true} {
				t.Run(fmt.Sprintf("max=%d/batch=%v", maxPer, batch), func(t *testing.T) {
					b := s.bundle(t, sqsfake.QueueOptions{})
					b.send(t, grouped("a", 10))
					var mu sync.Mutex
					done := 0
					c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
						mu.Lock()
						defer mu.Unlock()
						if string(m.Body) == "a-0" && done < 9 {
							return errors.New("fails until the others are done")
						}
						done++
						return nil
					})
					h, hb := c.handlerOf(batch)
					met := newTestMetrics()
					w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 1, HandlerBatch: hb, MaxPerGroup: maxPer,
						Backoff: noBackoff, Metrics: met, Handler: h})
					b.waitDeleted(t, 60*time.Second)
					workertest.Stop(t, w)
					if n := met.get(worker.Released); n != 0 {
						t.Errorf("%d messages released; a group id on a standard queue must not halt its group", n)
					}
					for i := 1; i < 10; i++ {
						if n := c.runs(fmt.Sprintf("a-%d", i)); n != 1 {
							t.Errorf("a-%d ran %d times, want 1", i, n)
						}
					}
				})
			}
		}
	})
}

// TestMaxPerGroupRefused: a negative MaxPerGroup is refused, naming the field.
func TestMaxPerGroupRefused(t *testing.T) {
	t.Parallel()
	h := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	_, err := worker.New(sqsfake.New(), &worker.Config{QueueURL: "u", Handler: h, MaxPerGroup: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.MaxPerGroup is -1") {
		t.Errorf("New = %v, want an error naming Config.MaxPerGroup", err)
	}
}

// TestRunBatchStandardQueueNoHalting: RunBatch keeps the FIFO rule for messages of a FIFO queue
// (or of no named queue) and none for a standard queue's, whose group ids name tenants.
func TestRunBatchStandardQueueNoHalting(t *testing.T) {
	t.Parallel()
	h := &funcBatch{fn: func(ctx context.Context, b *worker.Batch) []error {
		res := make([]error, b.Len())
		for i := range b.Len() {
			res[i] = b.Run(b.Context(i), i, func(context.Context) error {
				if i == 0 {
					return errors.New("fails")
				}
				return nil
			})
		}
		return res
	}}
	for _, tc := range []struct {
		queue  string
		halted bool
	}{{"orders.fifo", true}, {"", true}, {"orders", false}} {
		msgs := []*worker.Message{{Queue: tc.queue, GroupID: "g", Body: []byte("0")}, {Queue: tc.queue, GroupID: "g", Body: []byte("1")}}
		res := worker.RunBatch(t.Context(), h, msgs, 0)
		if got := errors.Is(res[1], worker.ErrNotRun); got != tc.halted {
			t.Errorf("queue %q: second message's result %v; halted %v, want %v", tc.queue, res[1], got, tc.halted)
		}
	}
}

// TestMaxPerGroupHealthyTenantKept (fake; AWS too): one tenant alone, MaxPerGroup 1, Concurrency
// 2, Prefetch 1, a healthy 0.5 s handler, MaxHold 2 s, maxReceiveCount 2, 30 messages (a
// visibility timeout of 3 s: a heartbeat a second). The tenant holds every slot while the second
// runner is free, so the worker receives for that runner into its spare pool and gets the
// tenant's own messages, which wait their turn for up to 12 handler times, far past MaxHold. The
// tenant progresses all along, so none of them is released for waiting (each release spends a
// receive, and the second one dead-letters the message): every message runs exactly once, on its
// first receive, and the DLQ stays empty.
func TestMaxPerGroupHealthyTenantKept(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		const n = 30
		b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second, MaxReceiveCount: 2})
		b.send(t, grouped("a", n))
		var again atomic.Int32 // runs on a later receive than the first
		c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
			if m.ReceiveCount != 1 {
				again.Add(1)
			}
			select {
			case <-time.After(500 * time.Millisecond): // the work
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 2, Prefetch: 1, MaxPerGroup: 1,
			MaxHold: 2 * time.Second, Handler: c})
		b.waitDeleted(t, 120*time.Second)
		workertest.Stop(t, w)
		for i := range n {
			if r := c.runs(fmt.Sprintf("a-%d", i)); r != 1 {
				t.Errorf("a-%d ran %d times, want 1", i, r)
			}
		}
		if dead, err := sqstest.Count(t.Context(), s.client, b.dlq); err != nil || dead != 0 {
			t.Errorf("%d messages in the DLQ (err %v); want none: a message must not be dead-lettered for waiting in the worker", dead, err)
		}
		if k := again.Load(); k != 0 {
			t.Errorf("%d messages ran on a later receive: released for waiting while their tenant progressed", k)
		}
		if most := c.mostAtOnce("a"); most != 1 {
			t.Errorf("group a held %d runners at once; MaxPerGroup is 1", most)
		}
	})
}

// TestMaxPerGroupStuckTenantReleased (fake; AWS too): tenant a's handler is stuck (MaxPerGroup 1,
// Concurrency 2, Prefetch 1, MaxHold 3 s) and its other 12 messages fill the slots and the spare
// pool, waiting over the cap, while the second runner is free. Once a has made no progress for
// MaxHold they are released and give back their slots (State().Held falls to 0), the worker
// keeps receiving, and b's only message, sent behind a's backlog, runs on the free runner while
// a is still stuck. Every message runs exactly once in the end.
func TestMaxPerGroupStuckTenantReleased(t *testing.T) {
	eachServer(t, needs(sqstest.FairGroups), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, grouped("a", 13))
		release := make(chan struct{})
		ranB := make(chan struct{})
		c := newGroupCounter(func(ctx context.Context, m *worker.Message) error {
			if m.GroupID == "b" {
				close(ranB)
				return nil
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		rc := &receiveCounter{client: s.client}
		w := workertest.Start(t, rc, &worker.Config{QueueURL: b.url, Concurrency: 2, Prefetch: 1, MaxPerGroup: 1,
			MaxHold: 3 * time.Second, WaitTime: time.Second, Handler: c})
		released := false
		defer func() {
			if !released {
				close(release)
			}
			workertest.Stop(t, w)
		}()
		sqstest.WaitFor(t, 30*time.Second, "a's 12 other messages held over the cap", func() (bool, string) {
			st := w.State()
			return st.Held == 12, fmt.Sprintf("held %d", st.Held)
		})
		b.send(t, grouped("b", 1))
		sawZero := false
		sqstest.WaitFor(t, 30*time.Second, "b-0 run and a's held messages released while a is stuck", func() (bool, string) {
			st := w.State()
			sawZero = sawZero || st.Held == 0
			select {
			case <-ranB:
				return sawZero, fmt.Sprintf("b-0 ran; held %d, never 0 yet", st.Held)
			default:
				return false, fmt.Sprintf("b-0 not run; held %d (0 seen: %v)", st.Held, sawZero)
			}
		})
		calls := rc.n.Load()
		sqstest.WaitFor(t, 30*time.Second, "more receives while a is stuck", func() (bool, string) {
			got := rc.n.Load()
			return got > calls+1, fmt.Sprintf("%d receives, %d before", got, calls)
		})
		released = true
		close(release)
		b.waitDeleted(t, 60*time.Second)
		for i := range 13 {
			if r := c.runs(fmt.Sprintf("a-%d", i)); r != 1 {
				t.Errorf("a-%d ran %d times, want 1", i, r)
			}
		}
		if most := c.mostAtOnce("a"); most != 1 {
			t.Errorf("group a held %d runners at once; MaxPerGroup is 1", most)
		}
	})
}

// receiveCounter is a server's client that counts the ReceiveMessage calls made through it.
type receiveCounter struct {
	client
	n atomic.Int64
}

func (c *receiveCounter) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.n.Add(1)
	return c.client.ReceiveMessage(ctx, in, optFns...)
}

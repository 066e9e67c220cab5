package worker_test

import (
	"cmp"
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

// Behaviours of the worker under faults and in FIFO groups. Tests that need injected faults run on
// the in-process fake only (sqstest.Faults); the others run on every server that has what they
// declare.

// fakeBundle is a queue, and its DLQ when asked for, on the server s; f is the fake's own controls
// (nil on a real server, where no test that uses them runs).
type fakeBundle struct {
	s   *server
	f   *sqsfake.Fake
	url string
	dlq string
}

// bundle creates the queue o describes (a Name ending in .fifo makes a FIFO queue).
func (s *server) bundle(t *testing.T, o sqsfake.QueueOptions) *fakeBundle {
	t.Helper()
	q := s.queue(t, sqstest.QueueOptions{Prefix: cmp.Or(strings.TrimSuffix(o.Name, ".fifo"), "q"), FIFO: strings.HasSuffix(o.Name, ".fifo"),
		VisibilityTimeout: o.VisibilityTimeout, Retention: o.Retention, MaxReceiveCount: o.MaxReceiveCount})
	return &fakeBundle{s: s, f: s.fake, url: q.URL, dlq: q.DLQURL}
}

func (b *fakeBundle) send(t *testing.T, msgs []sqstest.Message) {
	t.Helper()
	b.s.send(t, b.url, msgs)
}

func (b *fakeBundle) waitDeleted(t *testing.T, timeout time.Duration) {
	t.Helper()
	b.s.waitCount(t, b.url, 0, timeout)
}

func noBackoff(int) time.Duration { return 0 }

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	bo := worker.ExponentialBackoff(time.Second, time.Minute)
	for _, tc := range []struct {
		n      int
		lo, hi time.Duration
	}{{1, 500 * time.Millisecond, time.Second}, {2, time.Second, 2 * time.Second}, {4, 4 * time.Second, 8 * time.Second},
		{7, 30 * time.Second, time.Minute}, {50, 30 * time.Second, time.Minute}, {0, 500 * time.Millisecond, time.Second}} {
		for range 50 {
			if d := bo(tc.n); d < tc.lo || d > tc.hi {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", tc.n, d, tc.lo, tc.hi)
			}
		}
	}
}

// TestFIFO (servers with FIFO): messages of one group run one at a time and in order; groups run in
// parallel; when one fails, the later messages of its group from that receive are released and
// run only after it.
func TestFIFO(t *testing.T) {
	eachServer(t, needs(sqstest.FIFO), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo"})
		const groups, per = 4, 25
		var msgs []sqstest.Message
		for i := range per {
			for g := range groups {
				msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf("g%d-%02d", g, i), GroupID: fmt.Sprintf("g%d", g)})
			}
		}
		b.send(t, msgs)
		var (
			mu       sync.Mutex
			done     = map[string][]string{}
			running  = map[string]int{}
			failed   = map[string]bool{}
			parallel int
			maxPar   int
		)
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 20, Backoff: noBackoff, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				running[m.GroupID]++
				parallel++
				maxPar = max(maxPar, parallel)
				if running[m.GroupID] > 1 {
					t.Errorf("group %s has %d messages running", m.GroupID, running[m.GroupID])
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // work, so that groups overlap
				mu.Lock()
				defer mu.Unlock()
				running[m.GroupID]--
				parallel--
				body := string(m.Body)
				if strings.HasSuffix(body, "-07") && !failed[body] {
					failed[body] = true
					return errors.New("fails once")
				}
				done[m.GroupID] = append(done[m.GroupID], body)
				return nil
			})})
		b.waitDeleted(t, 30*time.Second)
		workertest.Stop(t, w)
		mu.Lock()
		defer mu.Unlock()
		for g := range groups {
			gid := fmt.Sprintf("g%d", g)
			var want []string
			for i := range per {
				want = append(want, fmt.Sprintf("%s-%02d", gid, i))
			}
			if fmt.Sprint(done[gid]) != fmt.Sprint(want) {
				t.Errorf("group %s ran %v, want %v", gid, done[gid], want)
			}
		}
		if maxPar < 2 {
			t.Errorf("at most %d handlers ran at once; groups should run in parallel", maxPar)
		}
	})
}

// TestFIFOReleaseBehindFailure (servers with several messages of a group per receive): the messages received behind a failed one of the same
// group are released, not run, and run after it.
func TestFIFOReleaseBehindFailure(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo"})
		var msgs []sqstest.Message
		for i := range 10 {
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprint(i), GroupID: "g"})
		}
		b.send(t, msgs)
		var mu sync.Mutex
		var order []string
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 10, Pollers: 1, Backoff: noBackoff, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, string(m.Body))
				if string(m.Body) == "3" && m.ReceiveCount == 1 {
					return errors.New("fails once")
				}
				return nil
			})})
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(order); got != "[0 1 2 3 3 4 5 6 7 8 9]" {
			t.Errorf("ran %s", got)
		}
		if r := met.get(worker.Released); r != 6 {
			t.Errorf("released %d, want the 6 behind the failed one", r)
		}
	})
}

// TestReceiveErrorsBackOff (servers with injected faults): throttling, KmsThrottled, OverLimit and 5xx make the
// pollers back off rather than spin, and the worker recovers when they end.
func TestReceiveErrorsBackOff(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		for _, fault := range []error{sqsfake.Throttled, sqsfake.KMSThrottled, sqsfake.OverLimit, sqsfake.Unavailable} {
			t.Run(fault.Error(), func(t *testing.T) {
				s := s.fresh() // a fake of its own: its faults are not the other subtests\'
				t.Parallel()
				b := s.bundle(t, sqsfake.QueueOptions{})
				b.send(t, bodies(30, "m"))
				var failing atomic.Bool
				failing.Store(true)
				b.f.SetFaults(sqsfake.Faults{Before: func(op string, _ any) error {
					if op == "ReceiveMessage" && failing.Load() {
						return fault
					}
					return nil
				}})
				met := newTestMetrics()
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 10, Pollers: 2, Metrics: met,
					Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
				start := time.Now()
				sqstest.WaitFor(t, 30*time.Second, "a few failed receives", func() (bool, string) {
					return met.get(worker.ReceiveErrors) >= 6, fmt.Sprint(met.get(worker.ReceiveErrors))
				})
				// 2 pollers backing off from 100 ms, doubling: 6 failures take at least ~2 × (50+100) ms.
				if el := time.Since(start); el < 150*time.Millisecond {
					t.Errorf("6 failed receives in %v: the pollers do not back off", el)
				}
				failing.Store(false)
				b.waitDeleted(t, 40*time.Second)
				workertest.Stop(t, w)
			})
		}
	})
}

// TestPartialDeleteFailure (servers with injected faults): a DeleteMessageBatch that fails some entries is retried
// with only those entries; every message is deleted once.
func TestPartialDeleteFailure(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(100, "m"))
		var mu sync.Mutex
		seen := map[string]int{}
		b.f.SetFaults(sqsfake.Faults{DeleteEntry: func(h string) string {
			mu.Lock()
			defer mu.Unlock()
			seen[h]++
			if seen[h] == 1 && len(seen)%3 == 0 {
				return "InternalError"
			}
			return ""
		}})
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 20, Metrics: met,
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		mu.Lock()
		defer mu.Unlock()
		retried := 0
		for h, n := range seen {
			switch n {
			case 1:
			case 2:
				retried++
			default:
				t.Errorf("handle %s sent %d times", h, n)
			}
		}
		if retried != len(seen)/3 {
			t.Errorf("%d entries retried, want the %d that failed", retried, len(seen)/3)
		}
		for _, m := range b.f.Messages(b.url) {
			if m.Deletes != 1 || m.ReceiveCount != 1 {
				t.Errorf("message %s: %d deletes, %d receives", m.Body, m.Deletes, m.ReceiveCount)
			}
		}
		if met.get(worker.Deleted) != 100 || met.get(worker.DeleteFailures) != 0 {
			t.Errorf("deleted %d, delete failures %d", met.get(worker.Deleted), met.get(worker.DeleteFailures))
		}
	})
}

// TestDeleteGiveUp (servers with injected faults): a delete that keeps failing is given up after a few tries and
// counted; the message stays in the queue for its redelivery (which an inbox makes a duplicate).
func TestDeleteGiveUp(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(3, "m"))
		b.f.SetFaults(sqsfake.Faults{DeleteEntry: func(string) string { return "InternalError" }})
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
		sqstest.WaitFor(t, 20*time.Second, "delete failures counted", func() (bool, string) {
			return met.get(worker.DeleteFailures) == 3, fmt.Sprint(met.get(worker.DeleteFailures))
		})
		workertest.Stop(t, w)
		if n := b.f.Len(b.url); n != 3 {
			t.Errorf("%d messages left, want 3", n)
		}
	})
}

// TestStaleReceiptHandle (servers with injected faults): a delete refused because the handle is stale counts as gone
// and is not retried; a heartbeat refused for the same reason cancels the handler with
// ErrLeaseLost and the message is neither deleted nor given a new visibility.
func TestStaleReceiptHandle(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		t.Run("delete", func(t *testing.T) {
			s := s.fresh() // a fake of its own: its faults are not the other subtests\'
			t.Parallel()
			b := s.bundle(t, sqsfake.QueueOptions{})
			b.send(t, bodies(10, "m"))
			var entries atomic.Int32
			b.f.SetFaults(sqsfake.Faults{DeleteEntry: func(string) string { entries.Add(1); return "ReceiptHandleIsInvalid" }})
			met := newTestMetrics()
			var handled atomic.Int32
			w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
				Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { handled.Add(1); return nil })})
			sqstest.WaitFor(t, 10*time.Second, "10 handled", func() (bool, string) { return handled.Load() == 10, "" })
			workertest.Stop(t, w)
			if n := entries.Load(); n != 10 {
				t.Errorf("%d delete entries sent, want 10 (no retries)", n)
			}
			if met.get(worker.DeleteFailures) != 0 {
				t.Errorf("delete failures = %d", met.get(worker.DeleteFailures))
			}
		})
		t.Run("heartbeat", func(t *testing.T) {
			s := s.fresh() // a fake of its own: its faults are not the other subtests\'
			t.Parallel()
			b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second})
			b.send(t, bodies(1, "m"))
			var stale atomic.Bool
			stale.Store(true)
			var visCalls atomic.Int32
			b.f.SetFaults(sqsfake.Faults{Before: func(op string, _ any) error {
				if op == "ChangeMessageVisibility" {
					visCalls.Add(1)
					if stale.Load() {
						return sqsfake.Error("ReceiptHandleIsInvalid", "stale")
					}
				}
				return nil
			}})
			causes := make(chan error, 2)
			var calls atomic.Int32
			w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url,
				Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					if calls.Add(1) == 1 {
						<-ctx.Done()
						causes <- context.Cause(ctx)
						stale.Store(false)
						return ctx.Err()
					}
					return nil
				})})
			if c := <-causes; !errors.Is(c, worker.ErrLeaseLost) {
				t.Fatalf("cause = %v, want ErrLeaseLost", c)
			}
			b.waitDeleted(t, 20*time.Second) // after the visibility timeout
			workertest.Stop(t, w)
			if n := visCalls.Load(); n != 1 {
				t.Errorf("%d visibility calls; want only the failed heartbeat", n)
			}
			if m := b.f.Messages(b.url)[0]; m.ReceiveCount != 2 {
				t.Errorf("receive count %d, want 2", m.ReceiveCount)
			}
		})
	})
}

// TestDuplicateInBatch (servers with injected faults): the same message twice in one receive is handled twice (the
// handler, here a map standing in for the inbox, says duplicate) and deleted.
func TestDuplicateInBatch(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.f.SetFaults(sqsfake.Faults{DuplicateInBatch: func(string) bool { return true }})
		b.send(t, bodies(20, "m"))
		var mu sync.Mutex
		seen := map[string]bool{}
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if seen[m.ID] {
					return worker.ErrDuplicate
				}
				seen[m.ID] = true
				return nil
			})})
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		// A message is doubled only when the batch has room for the copy.
		p, d := met.get(worker.Processed), met.get(worker.Duplicates)
		if p != 20 || d < 5 {
			t.Errorf("processed %d, duplicates %d; want 20 and at least 5", p, d)
		}
		if del := met.get(worker.Deleted); del != p+d {
			t.Errorf("deleted %d, want %d (each handle)", del, p+d)
		}
	})
}

// TestHandlerTimeoutPanicRetry (servers with injected faults): a timeout, a panic, RetryAfter and Discard each
// steer the message as documented.
func TestHandlerTimeoutPanicRetry(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		var mu sync.Mutex
		var vis []string
		b.f.SetFaults(sqsfake.Faults{Before: func(op string, in any) error {
			if in, ok := in.(*sqs.ChangeMessageVisibilityInput); ok {
				mu.Lock()
				vis = append(vis, fmt.Sprint(in.VisibilityTimeout))
				mu.Unlock()
			}
			return nil
		}})
		b.send(t, []sqstest.Message{{Body: "timeout"}, {Body: "panic"}, {Body: "later"}, {Body: "discard"}})
		met := newTestMetrics()
		var causes sync.Map
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, HandlerTimeout: 100 * time.Millisecond, Metrics: met,
			Backoff: func(int) time.Duration { return 0 },
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if m.ReceiveCount > 1 {
					return nil
				}
				switch string(m.Body) {
				case "timeout":
					<-ctx.Done()
					causes.Store("timeout", context.Cause(ctx))
					return ctx.Err()
				case "panic":
					panic("boom")
				case "later":
					return worker.RetryAfter(1500 * time.Millisecond)
				}
				return worker.Discard("unknown event type")
			})})
		b.waitDeleted(t, 20*time.Second)
		workertest.Stop(t, w)
		if c, _ := causes.Load("timeout"); !errors.Is(c.(error), worker.ErrHandlerTimeout) {
			t.Errorf("timeout cause = %v", c)
		}
		if f, r, d := met.get(worker.Failed), met.get(worker.Retried), met.get(worker.Discarded); f != 2 || r != 3 || d != 1 {
			t.Errorf("failed %d, retried %d, discarded %d; want 2, 3, 1", f, r, d)
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(fmt.Sprint(vis), "2") {
			t.Errorf("visibility changes %v; want a 2 s one for RetryAfter(1.5 s)", vis)
		}
	})
}

// TestUnavailablePauses (servers with injected faults): while the handler reports its dependency unavailable, the
// pollers pause instead of burning the receive counts of the whole queue.
func TestUnavailablePauses(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(200, "m"))
		var down atomic.Bool
		down.Store(true)
		var failures atomic.Int32
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 10, Backoff: noBackoff,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if down.Load() {
					failures.Add(1)
					return worker.Unavailable(errors.New("connection refused"))
				}
				return nil
			})})
		sqstest.WaitFor(t, 10*time.Second, "failures", func() (bool, string) { return failures.Load() > 0, "" })
		start := time.Now()
		sqstest.WaitFor(t, 20*time.Second, "3 s of outage", func() (bool, string) { return time.Since(start) > 3*time.Second, "" })
		received := 0
		for _, m := range b.f.Messages(b.url) {
			received += m.ReceiveCount
		}
		down.Store(false)
		// Without the pause, 10 slots and no backoff would receive hundreds of times in 3 s.
		if received > 100 {
			t.Errorf("%d receives during the outage; the pollers did not pause", received)
		}
		b.waitDeleted(t, 60*time.Second)
		workertest.Stop(t, w)
	})
}

// TestBackpressure (servers with injected faults): the worker holds at most Concurrency × HandlerBatch + Prefetch
// received messages: with the default prefetch (Concurrency), 7 run and 7 wait, held and
// counted in State; with Prefetch -1, it never holds more than it runs.
func TestBackpressure(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		for _, tc := range []struct {
			prefetch, held int
		}{{0, 7}, {-1, 0}, {3, 3}} {
			t.Run(fmt.Sprint("prefetch=", tc.prefetch), func(t *testing.T) {
				s := s.fresh() // a fake of its own: its faults are not the other subtests\'
				t.Parallel()
				b := s.bundle(t, sqsfake.QueueOptions{})
				b.send(t, bodies(100, "m"))
				var maxAsk atomic.Int32
				b.f.SetFaults(sqsfake.Faults{Before: func(op string, in any) error {
					if in, ok := in.(*sqs.ReceiveMessageInput); ok && in.MaxNumberOfMessages > maxAsk.Load() {
						maxAsk.Store(in.MaxNumberOfMessages)
					}
					return nil
				}})
				release := make(chan struct{})
				var running atomic.Int32
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Concurrency: 7, Pollers: 3, Prefetch: tc.prefetch,
					Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
						running.Add(1)
						<-release
						return nil
					})})
				limit := 7 + tc.held
				inFlight := func() int {
					n := 0
					for _, m := range b.f.Messages(b.url) {
						if m.InFlight {
							n++
						}
					}
					return n
				}
				sqstest.WaitFor(t, 10*time.Second, "7 handlers running and the prefetch held", func() (bool, string) {
					st := w.State()
					return running.Load() == 7 && st.Held == tc.held && inFlight() == limit,
						fmt.Sprintf("running %d, held %d, in flight at SQS %d", running.Load(), st.Held, inFlight())
				})
				if n := inFlight(); n != limit || w.InFlight() != 7 {
					t.Errorf("%d messages in flight at SQS, %d handlers; want %d and 7", n, w.InFlight(), limit)
				}
				close(release)
				b.waitDeleted(t, 20*time.Second)
				workertest.Stop(t, w)
				if m := maxAsk.Load(); int(m) > limit {
					t.Errorf("a receive asked for %d messages with %d slots", m, limit)
				}
				if running.Load() != 100 {
					t.Errorf("%d handler runs for 100 messages", running.Load())
				}
			})
		}
	})
}

// TestStopReleasesHeldGroup (servers with several messages of a group per receive and injected faults): Stop lets the running handler finish and releases the messages of
// its FIFO group that had not started, with single calls when the batch call is missing (GoAws).
func TestStopReleasesHeldGroup(t *testing.T) {
	eachServer(t, needs(sqstest.GroupBatch, sqstest.Faults), func(t *testing.T, s *server) {
		for _, noBatch := range []bool{false, true} {
			t.Run(fmt.Sprint("noBatch=", noBatch), func(t *testing.T) {
				s := s.fresh() // a fake of its own: its faults are not the other subtests\'
				t.Parallel()
				b := s.bundle(t, sqsfake.QueueOptions{Name: ".fifo"})
				b.f.SetFaults(sqsfake.Faults{NoChangeVisibilityBatch: noBatch})
				var msgs []sqstest.Message
				for i := range 10 {
					msgs = append(msgs, sqstest.Message{Body: fmt.Sprint(i), GroupID: "g"})
				}
				b.send(t, msgs)
				started := make(chan struct{})
				release := make(chan struct{})
				met := newTestMetrics()
				w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url, Metrics: met,
					Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
						close(started)
						<-release
						return nil
					})})
				<-started
				stopped := make(chan error)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					stopped <- w.Stop(ctx)
				}()
				sqstest.WaitFor(t, 10*time.Second, "released", func() (bool, string) {
					return met.get(worker.Released) == 9, fmt.Sprint(met.get(worker.Released))
				})
				close(release)
				if err := <-stopped; err != nil {
					t.Fatal(err)
				}
				for i, m := range b.f.Messages(b.url) {
					if (i == 0) != m.Deleted || m.InFlight {
						t.Errorf("message %d: deleted %v, in flight %v", i, m.Deleted, m.InFlight)
					}
				}
			})
		}
	})
}

// TestStopAndCancel (servers with injected faults): StopAndCancel cancels running handlers with ErrStopping and
// makes their messages visible again at once.
func TestStopAndCancel(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{})
		b.send(t, bodies(5, "m"))
		var running atomic.Int32
		causes := make(chan error, 5)
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: b.url,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				running.Add(1)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			})})
		sqstest.WaitFor(t, 10*time.Second, "5 running", func() (bool, string) { return running.Load() == 5, "" })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.StopAndCancel(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if c := <-causes; !errors.Is(c, worker.ErrStopping) {
				t.Errorf("cause %v, want ErrStopping", c)
			}
		}
		for _, m := range b.f.Messages(b.url) {
			if m.Deleted || m.InFlight {
				t.Errorf("%s: deleted %v, in flight %v; want visible", m.Body, m.Deleted, m.InFlight)
			}
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	h := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	f := sqsfake.New()
	for _, tc := range []struct {
		field string
		cfg   worker.Config
	}{
		{"QueueURL", worker.Config{Handler: h}},
		{"Handler", worker.Config{QueueURL: "u"}},
		{"Concurrency", worker.Config{QueueURL: "u", Handler: h, Concurrency: -1}},
		{"BatchSize", worker.Config{QueueURL: "u", Handler: h, BatchSize: 11}},
		{"WaitTime", worker.Config{QueueURL: "u", Handler: h, WaitTime: 21 * time.Second}},
		{"WaitTime", worker.Config{QueueURL: "u", Handler: h, WaitTime: 1500 * time.Millisecond}},
		{"VisibilityTimeout", worker.Config{QueueURL: "u", Handler: h, VisibilityTimeout: 13 * time.Hour}},
		{"HandlerTimeout", worker.Config{QueueURL: "u", Handler: h, HandlerTimeout: 13 * time.Hour}},
		{"ShutdownTimeout", worker.Config{QueueURL: "u", Handler: h, ShutdownTimeout: -1}},
		{"DeleteInterval", worker.Config{QueueURL: "u", Handler: h, DeleteInterval: -1}},
		{"Pollers", worker.Config{QueueURL: "u", Handler: h, Pollers: -1}},
	} {
		_, err := worker.New(f, &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("%s: New = %v, want an error naming Config.%s", tc.field, err, tc.field)
		}
	}
	if _, err := worker.New(f, &worker.Config{QueueURL: "u", Handler: h}); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestWaitTimeAgainstHTTPTimeout: a client whose HTTP timeout does not exceed the long-poll wait
// is refused, naming WaitTime.
func TestWaitTimeAgainstHTTPTimeout(t *testing.T) {
	t.Parallel()
	c := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: &httpClientWithTimeout{10 * time.Second}})
	h := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	if _, err := worker.New(c, &worker.Config{QueueURL: "u", Handler: h}); err == nil || !strings.Contains(err.Error(), "Config.WaitTime") {
		t.Errorf("New = %v, want an error naming Config.WaitTime", err)
	}
	if _, err := worker.New(c, &worker.Config{QueueURL: "u", Handler: h, WaitTime: 5 * time.Second}); err != nil {
		t.Errorf("New with a 5 s wait: %v", err)
	}
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestDrain (servers over HTTP) drains a few thousand messages and fails if any message waited out a
// visibility timeout: the SDK's retry of a ReceiveMessage whose connection was closed under the
// response would lose up to ten messages to it (see PlainRequestBodies, which prevents it).
func TestDrain(t *testing.T) {
	eachServer(t, needs(sqstest.Wire), func(t *testing.T, s *server) {
		const n = 3000
		vis := 30 * time.Second
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "drain", VisibilityTimeout: vis})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(n, "m")); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		start := time.Now()
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 32, WaitTime: time.Second,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				rec.add(string(m.Body))
				return nil
			})})
		sqstest.WaitFor(t, vis-5*time.Second, "every message handled", func() (bool, string) {
			return rec.distinct() == n, fmt.Sprintf("%d of %d handled after %v", rec.distinct(), n, time.Since(start))
		})
		t.Logf("drained %d messages in %v", n, time.Since(start))
		workertest.Stop(t, w)
		s.waitCount(t, q.URL, 0, 10*time.Second)
		if d := rec.dupes(); d != 0 {
			t.Errorf("%d messages were handled twice", d)
		}
	})
}

// TestRetry (every server): a failed message comes back after the backoff, not the visibility
// timeout, and is deleted once it succeeds.
func TestRetry(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "retry", VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(20, "r")); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		met := newTestMetrics()
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
			Backoff: func(int) time.Duration { return time.Second },
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if rec.add(string(m.Body)) == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})})
		s.waitCount(t, q.URL, 0, 20*time.Second)
		workertest.Stop(t, w)
		for i := range 20 {
			if got := rec.count(fmt.Sprintf("r%d", i)); got != 2 {
				t.Errorf("r%d handled %d times, want 2", i, got)
			}
		}
		if got := met.get(worker.Failed); got != 20 {
			t.Errorf("failed = %d, want 20", got)
		}
		if got := met.get(worker.Deleted); got != 20 {
			t.Errorf("deleted = %d, want 20", got)
		}
	})
}

// TestDiscard (every server): Discard deletes without retry.
func TestDiscard(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "discard", MaxReceiveCount: 3})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(5, "d")); err != nil {
			t.Fatal(err)
		}
		met := newTestMetrics()
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				return worker.Discard("unknown schema version")
			})})
		s.waitCount(t, q.URL, 0, 20*time.Second)
		workertest.Stop(t, w)
		s.waitCount(t, q.DLQURL, 0, time.Second)
		if got := met.get(worker.Discarded); got != 5 {
			t.Errorf("discarded = %d, want 5", got)
		}
	})
}

// TestStartChecks (every server): Start reads the queue, finds it by name, and refuses what it must.
func TestStartChecks(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "checks", MaxReceiveCount: 4, Retention: 2 * time.Hour})
		h := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })

		t.Run("by name", func(t *testing.T) {
			var seen *worker.Queue
			w, err := worker.New(c, &worker.Config{QueueName: q.Name, WaitTime: time.Second,
				Handler: checker{h, func(q *worker.Queue) error { seen = q; return nil }}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			workertest.Stop(t, w)
			if seen == nil || seen.URL != q.URL {
				t.Fatalf("checker saw %+v, want URL %s", seen, q.URL)
			}
			if seen.MaxReceiveCount != 4 || seen.DeadLetterTargetARN == "" {
				t.Errorf("redrive policy = %q, %d", seen.DeadLetterTargetARN, seen.MaxReceiveCount)
			}
			if seen.MessageRetentionPeriod != 2*time.Hour || seen.RedeliveryHorizon() != 14*24*time.Hour {
				t.Errorf("retention %v, horizon %v; want 2h and the DLQ's 14 days", seen.MessageRetentionPeriod, seen.RedeliveryHorizon())
			}
			if seen.VisibilityTimeout != 30*time.Second {
				t.Errorf("visibility = %v", seen.VisibilityTimeout)
			}
		})
		t.Run("checker refuses", func(t *testing.T) {
			refuse := errors.New("retention too short")
			w, err := worker.New(c, &worker.Config{QueueURL: q.URL, Handler: checker{h, func(*worker.Queue) error { return refuse }}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(t.Context()); !errors.Is(err, refuse) {
				t.Fatalf("Start = %v, want the checker's error", err)
			}
		})
		t.Run("missing queue", func(t *testing.T) {
			w, err := worker.New(c, &worker.Config{QueueName: "no-such-queue-" + q.Name, Handler: h})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "no-such-queue") {
				t.Fatalf("Start = %v, want an error naming the queue", err)
			}
		})
	})
}

type checker struct {
	worker.Handler
	check func(*worker.Queue) error
}

func (c checker) CheckQueue(_ context.Context, q *worker.Queue) error { return c.check(q) }

// TestStopUnderLoad (every server): Stop in the middle of a drain loses nothing. Every message is
// either handled and deleted, or still in the queue (released ones included), and no goroutine is
// left (goleak in TestMain).
func TestStopUnderLoad(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		const n = 1500
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "stopload"})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(n, "s")); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		met := newTestMetrics()
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 16, WaitTime: time.Second, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				rec.add(string(m.Body))
				return nil
			})})
		sqstest.WaitFor(t, 20*time.Second, "a third handled", func() (bool, string) {
			return rec.distinct() >= n/3, fmt.Sprint(rec.distinct())
		})
		workertest.Stop(t, w)
		handled := rec.distinct()
		if handled == n {
			t.Fatal("the queue drained before Stop; the test did not test anything")
		}
		if met.get(worker.Deleted) != met.get(worker.Processed) {
			t.Errorf("deleted %d != processed %d after Stop", met.get(worker.Deleted), met.get(worker.Processed))
		}
		s.waitCount(t, q.URL, n-handled, 10*time.Second)
	})
}

// TestStartStopStress (every server): many short-lived workers on one queue; every message is
// handled, and each at most once when its delete succeeded.
func TestStartStopStress(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		const n = 600
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "stress"})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(n, "x")); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		for i := 0; rec.distinct() < n; i++ {
			if i > 100 {
				t.Fatalf("only %d of %d handled after %d workers", rec.distinct(), n, i)
			}
			target := min(n, rec.distinct()+n/20)
			w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 1 + i%20, WaitTime: time.Second,
				Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					rec.add(string(m.Body))
					return nil
				})})
			sqstest.WaitFor(t, 20*time.Second, "some messages handled", func() (bool, string) {
				return rec.distinct() >= target, fmt.Sprint(rec.distinct())
			})
			if i%2 == 0 {
				workertest.Stop(t, w)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				if err := w.StopAndCancel(ctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
		}
		s.waitCount(t, q.URL, 0, 10*time.Second)
		if d := rec.dupes(); d != 0 {
			t.Errorf("%d messages handled twice", d)
		}
	})
}

// TestProbesFollowThePausePace (every server): during an outage, the pollers probe one message at a
// time at the pause's pace (pauses of 0.25-0.5 s, doubling), never back to back. With eight
// pollers each waiting to probe, a failed probe once let the next poller probe at once, so an
// outage spent a receive per poller per pause, and a few messages ran up maxReceiveCount.
func TestProbesFollowThePausePace(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "probes", VisibilityTimeout: 30 * time.Second})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(200, "p")); err != nil {
			t.Fatal(err)
		}
		var down atomic.Bool
		down.Store(true)
		var mu sync.Mutex
		var fails []time.Time
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, Concurrency: 8, HandlerBatch: 1, Pollers: 8,
			WaitTime: time.Second,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if down.Load() {
					mu.Lock()
					fails = append(fails, time.Now())
					mu.Unlock()
					return worker.Unavailable(errors.New("connection refused"))
				}
				return nil
			})})
		sqstest.WaitFor(t, 10*time.Second, "the outage to begin", func() (bool, string) {
			return w.State().Paused, ""
		})
		begun := time.Now()
		sqstest.WaitFor(t, 20*time.Second, "4 s of outage", func() (bool, string) { return time.Since(begun) > 4*time.Second, "" })
		down.Store(false)
		mu.Lock()
		probes := 0
		for _, at := range fails {
			// Past the first second: handlers that began before the pause, or receives made as it
			// began, may still fail in it (on a loaded machine, for a while).
			if at.After(begun.Add(time.Second)) {
				probes++
			}
		}
		mu.Unlock()
		// Pauses of at least 0.25, 0.5, 1 and 2 s leave room for about 3 probes in the last 3 s of
		// the outage; back to back, eight pollers made 8 per pause.
		t.Logf("%d probes in the last 3 s of a 4 s outage", probes)
		if probes > 6 {
			t.Errorf("%d probes in the last 3 s of a 4 s outage; want at most 6 (one per pause)", probes)
		}
		s.waitCount(t, q.URL, 0, 60*time.Second)
		workertest.Stop(t, w)
	})
}

// TestRun (every server): Run returns Start's error when the worker cannot start (a queue that does
// not exist), and otherwise runs until its context ends and returns nil once stopped.
func TestRun(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "run"})
		bad, err := worker.New(c, &worker.Config{QueueURL: strings.TrimSuffix(q.URL, q.Name) + "no-such-queue",
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "no-such-queue") {
			t.Errorf("Run on a missing queue = %v; want Start's error naming it", err)
		}

		if err := sqstest.Send(t.Context(), c, q.URL, bodies(20, "r")); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Logger: discardLogger(),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				rec.add(string(m.Body))
				return nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		sqstest.WaitFor(t, 30*time.Second, "every message handled", func() (bool, string) {
			return rec.distinct() == 20, fmt.Sprintf("%d of 20", rec.distinct())
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after its context ended = %v; want nil", err)
			}
		case <-time.After(worker.DefaultShutdownTimeout + worker.HardStopTimeout + 5*time.Second):
			t.Fatal("Run did not return after its context ended")
		}
		if st := w.State(); st.Phase != "stopped" {
			t.Errorf("phase after Run = %q; want stopped", st.Phase)
		}
		s.waitCount(t, q.URL, 0, 10*time.Second)
	})
}

// TestJSONLogDurations (every server): the worker's durations reach a JSON log as Go duration
// strings ("retry_in":"1s"), not integers of nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "jsonlog", MaxReceiveCount: 5})
		if err := sqstest.Send(t.Context(), c, q.URL, bodies(1, "j")); err != nil {
			t.Fatal(err)
		}
		var logs sqstest.Buffer
		var calls atomic.Int32
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second,
			Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
			Backoff: func(int) time.Duration { return time.Second },
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				if calls.Add(1) == 1 {
					return errors.New("first try fails")
				}
				return nil
			})})
		s.waitCount(t, q.URL, 0, 30*time.Second)
		workertest.Stop(t, w)
		if !strings.Contains(logs.String(), `"retry_in":"1s"`) || !strings.Contains(logs.String(), `"took":"`) {
			t.Errorf("the failure's retry_in, or the stop's took, is not a duration string:\n%s", logs.String())
		}
	})
}

// TestCheckHealth (every server): CheckHealth, a hand-written worker's container health check,
// passes while the worker serving HealthHandler runs, and fails naming the answer once it has
// stopped, and without an address.
func TestCheckHealth(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		c := s.client
		q := s.queue(t, sqstest.QueueOptions{Prefix: "health"})
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second,
			Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })})
		hs := httptest.NewServer(worker.HealthHandler(w, nil))
		defer hs.Close()
		addr := strings.TrimPrefix(hs.URL, "http://")
		if err := worker.CheckHealth(t.Context(), addr); err != nil {
			t.Errorf("CheckHealth of a running worker = %v", err)
		}
		workertest.Stop(t, w)
		if err := worker.CheckHealth(t.Context(), addr); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), `"phase":"stopped"`) {
			t.Errorf("CheckHealth of a stopped worker = %v; want its 503 and state", err)
		}
		if err := worker.CheckHealth(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "HEALTH_ADDR") {
			t.Errorf("CheckHealth without an address = %v", err)
		}
	})
}

// limitedHandler is a handler whose calls each wait d, as one waiting on round trips to a
// database some milliseconds away does, and that takes up to max calls at once.
type limitedHandler struct {
	d     time.Duration
	max   int
	calls atomic.Int64
}

func (h *limitedHandler) Handle(ctx context.Context, m *worker.Message) error {
	h.calls.Add(1)
	return sleepCtx(ctx, h.d)
}

func (h *limitedHandler) MaxConcurrency() int { return h.max }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestConcurrencyFollowsTheHandler (every server): with Concurrency 0 and a handler that says it
// takes up to 40 calls at once, a backlog of handler calls that wait on round trips (20 ms each,
// whatever the concurrency) makes the worker run more than the default 10 at once, never more
// than 40; with Concurrency set, or a handler that says nothing, it keeps 10.
func TestConcurrencyFollowsTheHandler(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		for _, tc := range []struct {
			name        string
			concurrency int
			limited     bool
			grows       bool
		}{
			{"sized", 0, true, true},
			{"fixed by the user", 10, true, false},
			{"a handler without a limit", 0, false, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := s.client
				q := s.queue(t, sqstest.QueueOptions{Prefix: "conc"})
				if err := sqstest.Send(t.Context(), c, q.URL, bodies(3000, "c")); err != nil {
					t.Fatal(err)
				}
				h := &limitedHandler{d: 20 * time.Millisecond, max: 40}
				var handler worker.Handler = h
				if !tc.limited {
					handler = worker.HandlerFunc(h.Handle)
				}
				w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Concurrency: tc.concurrency, Handler: handler})
				most := 0
				sqstest.WaitFor(t, 60*time.Second, "a thousand messages handled", func() (bool, string) {
					st := w.State()
					most = max(most, st.Concurrency)
					if st.Concurrency > 40 {
						t.Fatalf("concurrency %d, past the handler's 40", st.Concurrency)
					}
					return h.calls.Load() >= 1000, fmt.Sprintf("%d handled, concurrency %d", h.calls.Load(), st.Concurrency)
				})
				workertest.Stop(t, w)
				t.Logf("the most concurrency seen: %d", most)
				if grew := most > 10; grew != tc.grows {
					t.Errorf("the most concurrency seen was %d; want it to grow past 10: %v", most, tc.grows)
				}
			})
		}
	})
}

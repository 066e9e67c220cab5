package worker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The sizer keeps enough receives in flight to hide the receive's round trip. By Little's law,
// moving R messages a second through a ReceiveMessage that takes L seconds needs about R × L
// messages on their way from SQS at any moment: on the loopback L is a millisecond and a few
// pollers do; with SQS 20 ms away, as in AWS, the same worker needs several times more. So, when
// Config.Pollers is 0, the worker measures L (the mean ReceiveMessage call that returned
// messages) and R (messages settled per second) and runs ceil(1.3 × R × L / BatchSize) + 1
// pollers, never fewer than DefaultPollers gives and never more than MaxPollers; while the
// receives are what limits R, that is more than run now, so the count grows until the runners
// are the limit. When Config.Prefetch is 0, the slots grow with the pollers, so that the
// messages on their way have room: the capacity is Concurrency × HandlerBatch plus the larger of
// that and pollers × BatchSize.

// MaxPollers is the most pollers the worker runs when it sizes them itself (Config.Pollers 0).
const MaxPollers = 64

// sizeEvery is how often the sizer looks.
const sizeEvery = 250 * time.Millisecond

type sizer struct {
	w          *Worker
	auto       bool // the pollers are sized (Config.Pollers was 0)
	autoCap    bool // the prefetch follows them (Config.Prefetch was 0)
	minP, maxP int
	maxCap     int // the slots semaphore's size

	pollers  atomic.Int64 // pollers that may receive now
	capacity atomic.Int64 // slots in use: maxCap less the reserve
	reserve  int64        // slots the sizer holds back; only its goroutine touches it

	wake    chan struct{} // closed and replaced when the poller count grows
	wakeMu  sync.Mutex
	started int // poller goroutines started (under wakeMu): they start as the count first grows

	recvNanos, recvCalls atomic.Int64 // ReceiveMessage calls that returned messages, and their time
}

// newSizer sizes the worker's pollers and capacity from cfg (its defaults filled in), which says
// whether the user fixed them.
func newSizer(w *Worker, autoPollers, autoPrefetch bool) *sizer {
	c := &w.cfg
	s := &sizer{w: w, auto: autoPollers, autoCap: autoPollers && autoPrefetch, minP: c.Pollers, maxP: c.Pollers,
		wake: make(chan struct{})}
	if s.auto {
		s.maxP = max(MaxPollers, c.Pollers)
	}
	s.maxCap = c.capacity()
	if s.autoCap {
		s.maxCap = c.Concurrency*c.HandlerBatch + max(c.Prefetch, s.maxP*c.BatchSize)
	}
	s.pollers.Store(int64(s.minP))
	s.capacity.Store(int64(c.capacity()))
	s.reserve = int64(s.maxCap - c.capacity())
	return s
}

// start starts pollers up to n, under wakeMu's guard against a stop.
func (s *sizer) start(n int) {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	s.startLocked(n)
}

func (s *sizer) startLocked(n int) {
	if s.w.life.Stopping() {
		return // the pollers are being waited for: no new one may join
	}
	for ; s.started < n; s.started++ {
		s.w.pollers.Add(1)
		go s.w.poll(s.started)
	}
}

// holdReserve takes the slots beyond the starting capacity out of use; call it before anything
// acquires slots.
func (s *sizer) holdReserve(e *engine) {
	if s.reserve > 0 {
		e.slots.TryAcquire(s.reserve) // nothing else holds slots yet
	}
}

// receiveTook records a ReceiveMessage call that returned messages.
func (s *sizer) receiveTook(d time.Duration) {
	s.recvNanos.Add(int64(d))
	s.recvCalls.Add(1)
}

// active reports whether poller i may receive now; when not, it returns a channel closed when the
// count grows.
func (s *sizer) active(i int) (bool, <-chan struct{}) {
	if int64(i) < s.pollers.Load() {
		return true, nil
	}
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if int64(i) < s.pollers.Load() {
		return true, nil
	}
	return false, s.wake
}

// run sizes the pollers and the capacity every sizeEvery until ctx ends.
func (s *sizer) run(ctx context.Context, e *engine) {
	if !s.auto {
		return
	}
	t := time.NewTicker(sizeEvery)
	defer t.Stop()
	last, lastSettled := time.Now(), e.settled.Load()
	var lastNanos, lastCalls int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			settled, nanos, calls := e.settled.Load(), s.recvNanos.Load(), s.recvCalls.Load()
			if e.pause.active() {
				// A dependency is down: back to the loopback's pollers and capacity, so that
				// when a probe ends the pause, the worker does not receive its whole grown
				// capacity into an outage that may not be over (each such message spends a
				// receive), and grows again from what it then measures.
				s.resize(e, s.minP, true)
			} else if calls > lastCalls {
				rate := float64(settled-lastSettled) / now.Sub(last).Seconds()
				l := time.Duration((nanos - lastNanos) / (calls - lastCalls)).Seconds()
				s.resize(e, s.want(rate, l), false)
			}
			last, lastSettled, lastNanos, lastCalls = now, settled, nanos, calls
		}
	}
}

// want is the pollers that keep R × L messages on their way, with a margin.
func (s *sizer) want(rate, latency float64) int {
	n := int(math.Ceil(1.3*rate*latency/float64(s.w.cfg.BatchSize))) + 1
	return min(max(n, s.minP), s.maxP)
}

// resize moves the poller count towards want: up at once, at least doubling (while the receives
// limit the rate, the rate measured understates what the runners can take), down by one a look
// (or at once, with now), so that a lull does not undo what a backlog needs. The capacity follows
// when the prefetch is sized too.
func (s *sizer) resize(e *engine, want int, now bool) {
	cur := int(s.pollers.Load())
	switch {
	case want > cur:
		cur = min(max(want, 2*cur), s.maxP)
	case want < cur && now:
		cur = want
	case want < cur:
		cur--
	}
	if s.autoCap {
		// The capacity follows the pollers; what cannot be taken back now (held by messages)
		// is taken at later looks.
		c := &s.w.cfg
		target := int64(c.Concurrency*c.HandlerBatch + max(c.Prefetch, cur*c.BatchSize))
		have := s.capacity.Load()
		switch {
		case target > have:
			e.slots.Release(target - have)
			s.reserve -= target - have
			have = target
		case target < have:
			for have > target && e.slots.TryAcquire(1) {
				s.reserve++
				have--
			}
		}
		s.capacity.Store(have)
	}
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if int64(cur) > s.pollers.Load() {
		s.pollers.Store(int64(cur))
		s.startLocked(cur)
		close(s.wake)
		s.wake = make(chan struct{})
		return
	}
	s.pollers.Store(int64(cur))
}

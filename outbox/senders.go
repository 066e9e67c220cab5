package outbox

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// sizeSendersEvery is how often a relay that sizes its senders looks.
const sizeSendersEvery = 50 * time.Millisecond

// senders is how many publishers may take a batch now, and what the sizer measures: the
// fastest publish call and the rows published since its last look.
type senders struct {
	auto     bool // RelayConfig.Senders was 0
	min, max int
	active   atomic.Int64

	mu   sync.Mutex
	wake chan struct{} // closed and replaced when active grows

	fastest atomic.Int64 // nanoseconds of the fastest call since the last look; 0: none
	rows    atomic.Int64 // rows of the calls made (published or not)
	calls   atomic.Int64
}

func (s *senders) init(fixed int) {
	s.auto, s.min, s.max = fixed == 0, fixed, fixed
	if s.auto {
		s.min, s.max = DefaultSenders, MaxSenders
	}
	s.active.Store(int64(s.min))
	s.wake = make(chan struct{})
}

// may reports whether publisher i may take a batch now; when not, it returns a channel closed
// when the count grows.
func (s *senders) may(i int) (bool, <-chan struct{}) {
	if int64(i) < s.active.Load() {
		return true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(i) < s.active.Load() {
		return true, nil
	}
	return false, s.wake
}

// took records a publish call of rows rows that took d.
func (s *senders) took(d time.Duration, rows int) {
	s.rows.Add(int64(rows))
	s.calls.Add(1)
	for {
		f := s.fastest.Load()
		if f != 0 && f <= int64(d) || s.fastest.CompareAndSwap(f, max(int64(d), 1)) {
			return
		}
	}
}

// resize sets the count from one look: the rows and calls since the last look, over window, the
// fastest call, and whether batches waited for a sender. While batches wait, it runs twice what
// Little's law asks for the rate measured (rate × fastest call ÷ rows per call): while the
// senders are what limits the rate, that doubles them at each look, until the rate stops
// growing with them (the CPU, the server or the database is then the limit); the fastest call,
// not the mean, so that a call slowed by a busy server does not ask for more senders to queue
// on it. With none waiting it falls back by one.
func (s *senders) resize(window time.Duration, rows, calls int64, fastest time.Duration, waiting bool) {
	cur := int(s.active.Load())
	n := cur - 1
	if waiting && calls > 0 && fastest > 0 {
		rate := float64(rows) / window.Seconds()
		perCall := float64(rows) / float64(calls)
		n = int(math.Ceil(2*rate*fastest.Seconds()/perCall)) + 1
	}
	n = min(max(n, s.min), s.max)
	if n == cur {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active.Store(int64(n))
	if n > cur {
		close(s.wake)
		s.wake = make(chan struct{})
	}
}

// sizeSenders sizes the senders every sizeSendersEvery until the relay stops, if it is to.
func (rl *Relay) sizeSenders() {
	defer rl.wg.Done()
	s := &rl.senders
	if !s.auto {
		return
	}
	t := time.NewTicker(sizeSendersEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-rl.stopCtx.Done():
			return
		case now := <-t.C:
			waiting := len(rl.jobs) > 0
			s.resize(now.Sub(last), s.rows.Swap(0), s.calls.Swap(0), time.Duration(s.fastest.Swap(0)), waiting)
			last = now
		}
	}
}

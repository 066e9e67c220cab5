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
// Config.Pollers is 0, the worker measures L (the fastest ReceiveMessage call that returned
// messages: the round trip without the wait in the server's queue, see roundTrip) and R
// (messages settled per second) and runs at least ceil(1.3 × R × L / BatchSize) + 1 pollers,
// never fewer than DefaultPollers gives (2 at a light load: see floor) and never more than
// MaxPollers; while the receives are what limits R, that is more than run now, so the count
// grows until the runners or the server are the limit. A server slow to answer (not far) limits
// the receives too: while they come back full and the runners have less than half a round of
// batches waiting, the count grows as well, and it falls back once a whole round waits (feed). When Config.Prefetch is 0, the slots grow
// with the pollers, so that the messages on their way have room: the capacity is Concurrency ×
// HandlerBatch plus the larger of that and pollers × BatchSize.

// The runners are sized too, when Config.Concurrency is 0 and the handler says how many calls it
// can take at once ([ConcurrencyLimiter]: for the inbox, its pool's connections less one). A
// handler whose time goes to round trips (a database 1 ms away) keeps its rate only with more
// calls in flight, but on a busy machine more calls only queue for the CPU. So the sizer follows
// the gradient of the handler's time per message: while the runners are busy and messages wait
// for them, it sets the runners to cur × (best time / time now) + sqrt(cur): the count grows
// while more calls do not slow each one down, and stops (or falls back) where they start to.
// Idle runners fall back by one a look, never under DefaultConcurrency.

// On an empty queue one long poll is enough: SQS bills each ReceiveMessage, and the minimum
// pollers long-polling an empty queue would cost that many requests per WaitTime. So at a look
// that saw receives come back empty and none return messages, the sized pollers fall to one; the
// first receive that returns messages again wakes the sizer (kick), which grows them back to the
// minimum at once; the next look sizes them as usual.

// MaxPollers is the most pollers the worker runs when it sizes them itself (Config.Pollers 0).
const MaxPollers = 64

// MaxConcurrency is the most handler calls in flight when the worker sizes them itself
// (Config.Concurrency 0 and a [ConcurrencyLimiter] handler).
const MaxConcurrency = 64

// ConcurrencyLimiter is implemented by a handler that says how many calls it can take at once:
// with Config.Concurrency 0, the worker runs from DefaultConcurrency up to that many (at most
// MaxConcurrency), as the handler's measured time per message allows. The inbox handler
// returns its pool's MaxConns less one (the purge loop's connection).
type ConcurrencyLimiter interface {
	MaxConcurrency() int
}

// sizeEvery is how often the sizer looks; growEvery, how soon it looks first, and again after a
// look that grew the pollers. Each look at most doubles them, and with SQS 20 ms away the 4
// pollers a worker starts with move about 1,500 messages a second: at one look in 250 ms, the
// ramp to 64 took a second, most of a run of 10,000 messages.
const (
	sizeEvery = 250 * time.Millisecond
	growEvery = 50 * time.Millisecond
)

// crew is what the sizer needs of the worker: starting pollers and runners, and knowing when it
// must start no more. The worker hands it these, not itself.
type crew struct {
	stopping func() bool  // true once the worker stops: it is waiting for its goroutines
	poller   func(id int) // starts poller id, counted in the worker's wait group
	runner   func(id int) // starts runner id, counted likewise
	batch    int          // Config.BatchSize: messages per receive
	handler  int          // Config.HandlerBatch: messages per handler call
	prefetch int          // Config.Prefetch
}

type sizer struct {
	crew
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

	recvCalls atomic.Int64  // ReceiveMessage calls that returned messages
	recvMsgs  atomic.Int64  // the messages they returned
	recvErrs  atomic.Int64  // ReceiveMessage calls that failed
	recvEmpty atomic.Int64  // ReceiveMessage calls that returned no message
	idle      atomic.Bool   // the pollers are down to one on an empty queue
	kick      chan struct{} // a receive that returned messages while idle asks for a look now
	recvMin   atomic.Int64  // the fastest of them since the last look, in nanoseconds (0: none)
	minL      float64       // the round trip the pollers are sized from: the fastest receive seen, drifting up 1% a look

	autoRun    bool // the runners are sized (Config.Concurrency was 0, the handler a ConcurrencyLimiter)
	minR, maxR int
	runners    atomic.Int64  // runners that may take work now
	runWake    chan struct{} // closed and replaced when the runner count grows (under wakeMu)
	runStarted int           // runner goroutines started (under wakeMu)
	best       float64       // the lowest handler seconds per message seen, drifting up 1% a look

	fedRate float64 // messages received per second when feed last grew the pollers (0: not growing)
}

// newSizer sizes the worker's pollers and capacity from c (its defaults filled in); the auto
// flags say which of them the user left to it. crew's sizes are taken from c.
func newSizer(c *Config, cr crew, autoPollers, autoPrefetch, autoConcurrency bool) *sizer {
	cr.batch, cr.handler, cr.prefetch = c.BatchSize, c.HandlerBatch, c.Prefetch
	s := &sizer{crew: cr, auto: autoPollers, autoCap: autoPrefetch, minP: c.Pollers, maxP: c.Pollers,
		minR: c.Concurrency, maxR: c.Concurrency, wake: make(chan struct{}), runWake: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	if s.auto {
		s.maxP = max(MaxPollers, c.Pollers)
	}
	if l, ok := c.Handler.(ConcurrencyLimiter); ok && autoConcurrency {
		s.autoRun = true
		s.maxR = min(max(l.MaxConcurrency(), s.minR), MaxConcurrency)
	}
	s.autoCap = s.autoCap && (s.auto || s.autoRun)
	s.maxCap = c.capacity()
	if s.autoCap {
		s.maxCap = s.maxR*c.HandlerBatch + max(c.Prefetch, s.maxP*c.BatchSize)
	}
	s.pollers.Store(int64(s.minP))
	s.runners.Store(int64(s.minR))
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
	if s.stopping() {
		return // the pollers are being waited for: no new one may join
	}
	for ; s.started < n; s.started++ {
		s.poller(s.started)
	}
}

// startRunners starts runner goroutines up to n, under wakeMu's guard against a stop.
func (s *sizer) startRunners(n int) {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	s.startRunnersLocked(n)
}

func (s *sizer) startRunnersLocked(n int) {
	if s.stopping() {
		return
	}
	for ; s.runStarted < n; s.runStarted++ {
		s.runner(s.runStarted)
	}
}

// runActive reports whether runner i may take work now; when not, it returns a channel closed
// when the count grows.
func (s *sizer) runActive(i int) (bool, <-chan struct{}) {
	if int64(i) < s.runners.Load() {
		return true, nil
	}
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if int64(i) < s.runners.Load() {
		return true, nil
	}
	return false, s.runWake
}

// holdReserve takes the slots beyond the starting capacity out of use; call it before anything
// acquires slots.
func (s *sizer) holdReserve(e *engine) {
	if s.reserve > 0 {
		e.slots.TryAcquire(s.reserve) // nothing else holds slots yet
	}
}

// receiveTook records a ReceiveMessage call that returned n messages (n > 0).
func (s *sizer) receiveTook(d time.Duration, n int) {
	s.recvCalls.Add(1)
	s.recvMsgs.Add(int64(n))
	for {
		m := s.recvMin.Load()
		if m != 0 && m <= int64(d) || s.recvMin.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// received records a ReceiveMessage call that returned n messages (0: none): while the pollers are
// idle, messages ask the sizer for a look now.
func (s *sizer) received(n int) {
	if n == 0 {
		s.recvEmpty.Add(1)
		return
	}
	if s.idle.Load() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
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
	if !s.auto && !s.autoRun {
		return
	}
	t := time.NewTimer(growEvery) // the first look comes soon: the pollers start at the fewest
	defer t.Stop()
	last, lastSettled := time.Now(), e.settled.Load()
	var lastCalls, lastMsgs, lastErrs, lastBusy, lastRun, lastEmpty int64
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		case <-s.kick:
			// Messages again after the queue was empty: back to the minimum pollers now, and
			// sized as usual at the next look (a rate measured over the moments since the
			// last look would be noise).
			if s.idle.Swap(false) {
				s.resize(e, s.minP, int(s.runners.Load()), false)
			}
			continue
		}
		settled, calls, msgs, errs := e.settled.Load(), s.recvCalls.Load(), s.recvMsgs.Load(), s.recvErrs.Load()
		empty := s.recvEmpty.Load()
		busy, ran := e.runNanos.Load(), e.runMsgs.Load()
		window := now.Sub(last).Seconds()
		pollers, runners := int(s.pollers.Load()), int(s.runners.Load())
		pollers0 := pollers
		switch {
		case e.pause.active():
			// A dependency is down: back to the loopback's pollers, runners and capacity, so
			// that when a probe ends the pause, the worker does not receive its whole grown
			// capacity into an outage that may not be over (each such message spends a
			// receive), and grows again from what it then measures.
			pollers, runners = s.minP, s.minR
			s.resize(e, pollers, runners, true)
		case s.auto && errs > lastErrs:
			// Receives fail (SQS throttles, errs or is unreachable): back to the fewest
			// pollers at once, so that the worker's calls in an outage are the backoff of a
			// few pollers, not of 64; they grow again from what the next receives measure.
			pollers = s.minP
			s.resize(e, pollers, runners, true)
		default:
			idle := s.auto && calls == lastCalls && empty > lastEmpty
			switch {
			case idle:
				// The queue is empty: one long poll waits for it.
				pollers = 1
			case s.auto && calls > lastCalls:
				rate, c, m := float64(settled-lastSettled)/window, calls-lastCalls, msgs-lastMsgs
				pollers = s.feed(s.want(rate, s.roundTrip(), s.floor(c, m)), runners, c, m, e.held.Load(), float64(m)/window)
			}
			if s.autoRun && ran > lastRun {
				runners = s.wantRunners(runners, time.Duration(busy-lastBusy).Seconds(), int(ran-lastRun), window, e.held.Load())
			}
			s.resize(e, pollers, runners, idle)
		}
		last, lastSettled, lastCalls, lastMsgs, lastErrs, lastBusy, lastRun, lastEmpty = now, settled, calls, msgs, errs, busy, ran, empty
		// Idle is one poller: a light load's floor is 2 (see floor), the others' more.
		s.idle.Store(s.auto && s.pollers.Load() == 1 && s.minP > 1)
		if int(s.pollers.Load()) > pollers0 {
			t.Reset(growEvery)
		} else {
			t.Reset(sizeEvery)
		}
	}
}

// wantRunners is the runner count for the next look, from cur runners that were busy for busy
// seconds in all over window seconds, handling msgs messages, with held messages waiting for them.
func (s *sizer) wantRunners(cur int, busy float64, msgs int, window float64, held int64) int {
	perMsg := busy / float64(msgs)
	if s.best == 0 || perMsg < s.best {
		s.best = perMsg
	} else {
		s.best *= 1.01 // forget a best seen under a lighter load, slowly
	}
	util := busy / (window * float64(cur))
	switch {
	case util > 0.8 && held >= int64(s.handler):
		// Busy, with work waiting: follow the gradient.
		g := min(max(s.best/perMsg, 0.5), 1)
		return min(max(int(float64(cur)*g+math.Sqrt(float64(cur))), s.minR), s.maxR)
	case util < 0.5:
		return max(cur-1, s.minR)
	}
	return cur
}

// roundTrip is the receive time the pollers are sized from, in seconds: the fastest receive
// that returned messages, seen since the last look or earlier (drifting up 1% a look, so that a
// route that became slower is followed). Not the mean: a receive also waits in the server's queue,
// and that wait grows with the receives in flight. Sized from the mean, more pollers would
// lengthen the receives, which would ask for more pollers, up to MaxPollers, on any server that
// is the limit (an emulator on the worker's cores, or a throttled queue), each holding messages
// the runners cannot take.
func (s *sizer) roundTrip() float64 {
	if m := s.recvMin.Swap(0); m > 0 {
		l := time.Duration(m).Seconds()
		if s.minL == 0 || l < s.minL {
			s.minL = l
			return l
		}
	}
	s.minL *= 1.01
	return s.minL
}

// feed adjusts the pollers that Little's law asks for (floor) to the runners' supply: the
// receives can be the limit without a long round trip, where the server itself is slow to answer
// (an emulator on the worker's cores). While the receives since the last look came back full (the
// queue has a backlog) and fewer than half a round of batches (runners × HandlerBatch) is waiting
// for the runners, more pollers are wanted; while a whole round is waiting, the runners are the
// limit and the pollers may fall back towards the floor; in between they stay. It grows them
// only while growing pays, and only up to feedRounds rounds of batches on their way: once a growth
// did not raise the messages received per second (rate) by a tenth, the server is the limit (an
// emulator on the worker's cores, or one still warming up), and more pollers would only hold more
// messages the runners cannot take yet (each poller's receive brings BatchSize, and they arrive
// together once the server catches up); they stay until the rate rises past that mark. A far
// server needs more on their way than that: Little's law (floor) asks for them.
func (s *sizer) feed(floor, runners int, calls, msgs, held int64, rate float64) int {
	cur := int(s.pollers.Load())
	round := int64(runners * s.handler)
	full := msgs*10 >= calls*int64(s.batch)*9
	grow := full && held < round/2
	if !grow {
		s.fedRate = 0
	}
	switch {
	case grow && (s.fedRate > 0 && rate < 1.1*s.fedRate || int64(cur*s.batch) >= feedRounds*round):
		return max(floor, cur)
	case grow:
		s.fedRate = rate
		return max(floor, cur+1)
	case held < round && !s.light(calls, msgs):
		return max(floor, cur)
	}
	return floor
}

// feedRounds is how many rounds of batches (runners × HandlerBatch) the pollers that feed adds
// may have on their way at most.
const feedRounds = 4

// lightPollers is the fewest pollers the sizer runs while messages arrive slower than its
// receives take them (see [sizer.floor]).
const lightPollers = 2

// light reports whether the receives since the last look came back less than half full on
// average: the queue has no backlog, each receive takes what arrived since the one before it.
func (s *sizer) light(calls, msgs int64) bool { return msgs*2 < calls*int64(s.batch) }

// floor is the fewest pollers for the next look, from the receives since the last one: the
// minimum, or lightPollers at a light load. Each receive there takes what arrived since the
// receive before it, so more pollers only split the arrivals into more, smaller receives (SQS
// bills each), and fewer lose nothing while the receives are half empty: a rise of the load
// fills them, and the next look grows the pollers back.
func (s *sizer) floor(calls, msgs int64) int {
	if s.light(calls, msgs) {
		return min(lightPollers, s.minP)
	}
	return s.minP
}

// want is the pollers that keep R × L messages on their way, with a margin, and at least floor.
func (s *sizer) want(rate, latency float64, floor int) int {
	n := int(math.Ceil(1.3*rate*latency/float64(s.batch))) + 1
	return min(max(n, floor), s.maxP)
}

// resize moves the poller count towards want: up at once, at least doubling (while the receives
// limit the rate, the rate measured understates what the runners can take), down by one a look
// (or at once, with now), so that a lull does not undo what a backlog needs. The capacity follows
// when the prefetch is sized too.
func (s *sizer) resize(e *engine, want, runners int, now bool) {
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
		// The capacity follows the pollers and the runners; what cannot be taken back now
		// (held by messages) is taken at later looks.
		target := int64(runners*s.handler + max(s.prefetch, cur*s.batch))
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
	if int64(runners) > s.runners.Load() {
		s.runners.Store(int64(runners))
		s.startRunnersLocked(runners)
		close(s.runWake)
		s.runWake = make(chan struct{})
	} else {
		s.runners.Store(int64(runners))
	}
	if int64(cur) > s.pollers.Load() {
		s.pollers.Store(int64(cur))
		s.startLocked(cur)
		close(s.wake)
		s.wake = make(chan struct{})
		return
	}
	s.pollers.Store(int64(cur))
}

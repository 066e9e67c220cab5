package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The pause: while a dependency every message needs is unavailable, all pollers wait, with
// growing backoff, and then probe with one message at a time. The messages in hand when it
// begins (running, or received and waiting) are parked, not sent back: their leases keep them
// invisible, a parked one is the probe, and they all run again when a probe succeeds. So an
// outage spends no receive count beyond the one receive of each message in hand (a database
// failover does not send messages to the DLQ), and the probes, which cost nothing, can follow
// one another closely: the worker resumes within pauseParkedMax of the dependency's return. On a
// FIFO queue a message is parked in its group instead (group.park), the later ones behind it, and
// its runner keeps the group through the pause (holdGroups); the same probes run from there.

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pauser pauses all pollers while a dependency is unavailable. A pause is logged once when it
// begins (Warn) and once when the first success ends it (Info), however many probes fail between.
type pauser struct {
	fails  atomic.Int64
	mu     sync.Mutex
	until  time.Time
	since  time.Time     // when the current outage began, or zero
	why    string        // the error that began it
	broken bool          // a broken deployment is among its causes (BrokenDeployment)
	probe  bool          // a parked message runs as the probe: no other probe until it settles
	change chan struct{} // closed when the pause ends or a probe settles (made by wait)
}

// fail starts a pause, unless one is on, and returns how long the pause lasts from now, at most
// longest. broken says err is a broken deployment: it is logged once at Error level.
func (p *pauser) fail(log *slog.Logger, err error, broken bool, longest time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	logged := false
	if broken && !p.broken {
		p.broken, logged = true, true
		p.why = err.Error()
		log.Error("worker: broken deployment: every message would fail the same way; pausing receives, then probing one "+
			"message at a time until one succeeds (check the migrations and grants of this release)", "error", err)
	}
	if now.Before(p.until) {
		return p.until.Sub(now) // already paused
	}
	n := p.fails.Add(1)
	d := jitter(expo(pauseBackoffMin, longest, int(n)))
	p.until = now.Add(d)
	if p.since.IsZero() {
		p.since, p.why = now, err.Error()
		if !logged {
			log.Warn("worker: a dependency is unavailable; pausing receives, then probing one message at a time", "pause", d, "error", err)
		}
	} else {
		log.Debug("worker: the dependency is still unavailable; pausing again", "pause", d, "consecutive", n, "error", err)
	}
	return d
}

// active reports whether the last results said the dependency is unavailable.
func (p *pauser) active() bool { return p.fails.Load() > 0 }

// left is how long the current pause lasts from now (0 when none is on).
func (p *pauser) left() time.Duration {
	if p.fails.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(time.Until(p.until), 0)
}

// due reports whether a pause is on and its time is up: a probe may be made now. A probe that
// failed while another poller waited to probe has started a new pause, which that poller must
// wait out: probes follow one another at the pause's pace, never back to back.
func (p *pauser) due() bool {
	if p.fails.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.probe && !time.Now().Before(p.until)
}

// startProbe reports whether a parked message may run as the probe now (a pause is on, its time
// is up and no probe runs), and if so marks the probe as running.
func (p *pauser) startProbe() bool {
	if p.fails.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probe || time.Now().Before(p.until) {
		return false
	}
	p.probe = true
	return true
}

// probing reports whether a parked probe runs.
func (p *pauser) probing() bool {
	if p.fails.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probe
}

// probeDone records that the parked probe settled (its result, if it has one for the pause, is
// given to ok or fail first), and wakes the pollers waiting for it.
func (p *pauser) probeDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probe = false
	p.wake()
}

// wake wakes the pollers in wait; p.mu must be held.
func (p *pauser) wake() {
	if p.change != nil {
		close(p.change)
		p.change = nil
	}
}

func (p *pauser) ok(log *slog.Logger) {
	if p.fails.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fails.Load() == 0 {
		return
	}
	log.Info("worker: the dependency is back; receives resumed", "outage", time.Since(p.since).Round(time.Millisecond),
		"failed_probes", p.fails.Load())
	p.fails.Store(0)
	p.until, p.since, p.why, p.broken, p.probe = time.Time{}, time.Time{}, "", false, false
	p.wake()
}

// state reports whether a pause is on, why, since when, and whether a broken deployment is
// among its causes.
func (p *pauser) state() (paused bool, why string, since time.Time, broken bool) {
	if p.fails.Load() == 0 {
		return false, "", time.Time{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.since.IsZero(), p.why, p.since, p.broken
}

// wait waits out the pause, if one is on: until its time is up and no parked probe runs, or until
// it ends.
func (p *pauser) wait(ctx context.Context) error {
	if p.fails.Load() == 0 {
		return ctx.Err()
	}
	p.mu.Lock()
	d := time.Until(p.until)
	if !p.probe && d <= 0 {
		p.mu.Unlock()
		return ctx.Err()
	}
	if p.change == nil {
		p.change = make(chan struct{})
	}
	change := p.change
	p.mu.Unlock()
	var due <-chan time.Time // none while a probe runs: its end wakes us
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		due = t.C
	}
	select {
	case <-due:
	case <-change:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// waitChange waits until the pause ends or a parked probe settles.
func (p *pauser) waitChange(ctx context.Context) error {
	p.mu.Lock()
	if p.fails.Load() == 0 {
		p.mu.Unlock()
		return ctx.Err()
	}
	if p.change == nil {
		p.change = make(chan struct{})
	}
	change := p.change
	p.mu.Unlock()
	select {
	case <-change:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// probeParked runs the parked messages' probes, one at a time at the pause's pace, until the
// worker stops.
func (w *Worker) probeParked() {
	ctx := w.life.StopContext()
	for {
		pk, p := &w.e.parked, &w.e.pause
		if changed := pk.changed(); pk.len() == 0 || !p.active() {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := p.wait(ctx); err != nil {
			return
		}
		pk.probe(p)
	}
}

// parking holds the deliveries parked in a pause (see the top of this file). Each keeps its slot
// and its lease (with no MaxHold: nothing else could run it). It hands one of them to the runners
// as the probe, all of them when the pause ends, and releases them at a stop.
type parking struct {
	mu     sync.Mutex
	ds     []*delivery
	ready  chan<- item   // the runners' queue; each parked delivery holds a slot, so it has room
	closed bool          // the worker stops: nothing is parked any more
	change chan struct{} // closed when a delivery is parked (made by changed)
	// waiting counts the runners that keep FIFO groups through the pause (Worker.holdGroups):
	// their messages are the probes, as parked ones are, so nothing is received meanwhile.
	waiting atomic.Int32
}

// changed returns a channel that is closed when a delivery is parked next.
func (pk *parking) changed() <-chan struct{} {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.change == nil {
		pk.change = make(chan struct{})
	}
	return pk.change
}

// park keeps d, whose message failed for an outage or was received before one began, and reports
// whether it did: not at a stop, nor when its lease is already lost.
func (pk *parking) park(d *delivery) bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.closed || !d.lease.keep() {
		return false
	}
	pk.ds = append(pk.ds, d)
	if pk.change != nil {
		close(pk.change)
		pk.change = nil
	}
	return true
}

// isClosed reports whether the worker stops: nothing may be parked any more, in the parking or
// in a FIFO group.
func (pk *parking) isClosed() bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return pk.closed
}

// len is the number of deliveries parked.
func (pk *parking) len() int {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return len(pk.ds)
}

// probe hands the longest parked delivery to the runners as the probe of p, if one may run now.
func (pk *parking) probe(p *pauser) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if len(pk.ds) > 0 && !pk.closed && p.startProbe() {
		d := pk.ds[0]
		pk.ds = pk.ds[1:]
		d.probe = true
		pk.ready <- item{d: d}
	}
}

// unpark hands every parked delivery to the runners: the pause is over.
func (pk *parking) unpark() {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.closed {
		return
	}
	for _, d := range pk.ds {
		pk.ready <- item{d: d}
	}
	pk.ds = nil
}

// close releases the parked deliveries (visible again at once) and parks none from here on. It is
// called before the runners' queue is closed.
func (pk *parking) close() {
	pk.mu.Lock()
	ds := pk.ds
	pk.ds, pk.closed = nil, true
	pk.mu.Unlock()
	releaseAll(ds)
}

// episodeLog logs the first of a run of like events at Warn and the rest at Debug, until quiet
// has passed without one: a lease lost in an SQS outage is then one warning, not one per message.
type episodeLog struct {
	mu    sync.Mutex
	last  time.Time
	quiet time.Duration
}

func (e *episodeLog) level() slog.Level {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	first := e.last.IsZero() || now.Sub(e.last) > e.quiet
	e.last = now
	if first {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

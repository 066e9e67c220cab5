package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The pause: while a dependency every message needs is unavailable, all pollers wait, with
// growing backoff, and then probe with one message at a time.

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
	since  time.Time // when the current outage began, or zero
	why    string    // the error that began it
	broken bool      // a broken deployment is among its causes (BrokenDeployment)
}

// fail starts a pause, unless one is on, and returns how long the pause lasts from now. broken
// says err is a broken deployment: it is logged once at Error level.
func (p *pauser) fail(log *slog.Logger, err error, broken bool) time.Duration {
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
	d := jitter(expo(pauseBackoffMin, pauseBackoffMax, int(n)))
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
	return !time.Now().Before(p.until)
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
	p.until, p.since, p.why, p.broken = time.Time{}, time.Time{}, "", false
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

func (p *pauser) wait(ctx context.Context) error {
	if p.fails.Load() == 0 {
		return ctx.Err()
	}
	p.mu.Lock()
	d := time.Until(p.until)
	p.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, d)
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

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

// pauser pauses all pollers while a dependency is unavailable.
type pauser struct {
	fails atomic.Int64
	mu    sync.Mutex
	until time.Time
}

// fail starts a pause, unless one is on, and returns how long the pause lasts from now.
func (p *pauser) fail(log *slog.Logger) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Before(p.until) {
		return p.until.Sub(now) // already paused
	}
	n := p.fails.Add(1)
	d := jitter(expo(pauseBackoffMin, pauseBackoffMax, int(n)))
	p.until = now.Add(d)
	log.Warn("worker: a dependency is unavailable; pausing receives", "pause", d, "consecutive", n)
	return d
}

// active reports whether the last results said the dependency is unavailable.
func (p *pauser) active() bool { return p.fails.Load() > 0 }

func (p *pauser) ok() {
	if p.fails.Load() == 0 {
		return
	}
	p.mu.Lock()
	p.fails.Store(0)
	p.until = time.Time{}
	p.mu.Unlock()
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

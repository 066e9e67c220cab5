// Package startstop is the life of the project's long-lived services (worker.Worker and
// outbox.Relay): started once (a failed start may be tried again), stopped softly (no new work;
// the work in flight finishes) or hard (the work in flight is cancelled), with one context that
// ends when the stop begins and one that ends at a hard stop, both with the service's own cause
// (its ErrStopping), and a channel closed when the last of its goroutines has ended. A service
// embeds a Base and keeps only what is its own: what it starts and how it shuts down.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// Base is the start/stop state of one service. The zero value is a service not started; Cause
// must be set before Start.
type Base struct {
	// Cause is the cause with which the stop and work contexts end (the service's ErrStopping).
	Cause error
	// Name names the service in errors ("worker", "outbox: relay").
	Name string

	mu       sync.Mutex
	starting bool
	running  bool // started, and not yet asked to stop
	stopped  bool // asked to stop
	done     chan struct{}

	stopCtx    context.Context
	stopCancel context.CancelCauseFunc
	workCtx    context.Context
	workCancel context.CancelCauseFunc
}

// BeginStart marks the start as begun; it fails if the service was started already.
func (b *Base) BeginStart() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.starting || b.running || b.stopped {
		return errors.New(b.Name + ": Start called twice")
	}
	b.starting = true
	return nil
}

// EndStart ends the start: with ok, the service runs, and its contexts descend from ctx without
// its cancellation (ctx bounds the start only, and carries values); without, the start may be
// tried again.
func (b *Base) EndStart(ctx context.Context, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starting = false
	if !ok {
		return
	}
	base := context.WithoutCancel(ctx)
	b.stopCtx, b.stopCancel = context.WithCancelCause(base)
	b.workCtx, b.workCancel = context.WithCancelCause(base)
	b.done = make(chan struct{})
	b.running = true
}

// StopContext ends when the stop begins: no new work may start.
func (b *Base) StopContext() context.Context { return b.stopCtx }

// WorkContext ends at a hard stop: the work in flight is cancelled.
func (b *Base) WorkContext() context.Context { return b.workCtx }

// BeginStop begins the stop: the stop context ends. first is true for the first call; it fails on
// a service that is not running.
func (b *Base) BeginStop() (first bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running && !b.stopped {
		return false, errors.New(b.Name + ": Stop called before Start succeeded")
	}
	first = !b.stopped
	b.running, b.stopped = false, true
	b.stopCancel(b.Cause)
	return first, nil
}

// CancelWork cancels the work in flight: a hard stop.
func (b *Base) CancelWork() { b.workCancel(b.Cause) }

// Finished closes Done: every goroutine of the service has ended. Call it once.
func (b *Base) Finished() { close(b.done) }

// Done is closed once the service has stopped.
func (b *Base) Done() <-chan struct{} { return b.done }

// Phase is "new" (not started), "running", "stopping" or "stopped".
func (b *Base) Phase() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.running:
		return "running"
	case !b.stopped:
		return "new"
	}
	select {
	case <-b.done:
		return "stopped"
	default:
		return "stopping"
	}
}

// Stopping reports whether the stop has begun.
func (b *Base) Stopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

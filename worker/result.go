package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
)

// Causes with which the worker cancels a handler's context. A handler tells them apart with
// context.Cause(ctx).
var (
	// ErrLeaseLost means the message's visibility could not be extended (its receipt handle is no
	// longer valid, or SQS's 12-hour cap from this delivery's receive was reached). Another consumer may
	// already hold the message, so the handler's work must not commit.
	ErrLeaseLost = errors.New("worker: lease on the message lost")
	// ErrStopping means the worker is stopping and does not wait for the handler any longer
	// (StopAndCancel, or Stop's deadline passed).
	ErrStopping = errors.New("worker: stopping")
	// ErrHandlerTimeout means the handler ran longer than Config.HandlerTimeout.
	ErrHandlerTimeout = errors.New("worker: handler timeout")
)

// ErrDuplicate is returned by a handler to say that the message's work was already done (an
// inbox found the event's row). The worker deletes the message and counts it as a duplicate.
var ErrDuplicate = errors.New("worker: duplicate: already processed")

// RetryError is the result of [RetryAfter].
type RetryError struct {
	// After is the delay before the message is delivered again.
	After time.Duration
	// Err is the reason, if given.
	Err error
}

func (e *RetryError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("worker: retry after %v: %v", e.After, e.Err)
	}
	return fmt.Sprintf("worker: retry after %v", e.After)
}

func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter is returned by a handler to have the message delivered again after d instead of
// after the backoff. d is rounded up to whole seconds and capped by SQS's 12-hour cap
// ([MaxVisibility]). The message's receive count still grows, so the queue's redrive policy still
// applies.
func RetryAfter(d time.Duration) error { return &RetryError{After: d} }

// BlockedError is the result of [RetryBlocked].
type BlockedError struct {
	// After is the delay before the message is delivered again.
	After time.Duration
	// Err says what holds the message's work, if known.
	Err error
}

func (e *BlockedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("worker: blocked behind another holder, retry after %v: %v", e.After, e.Err)
	}
	return fmt.Sprintf("worker: blocked behind another holder, retry after %v", e.After)
}

func (e *BlockedError) Unwrap() error { return e.Err }

// RetryBlocked is returned by a handler whose work is held by another consumer (an inbox claim
// of the same event that has not committed yet): the message is delivered again after d, like
// [RetryAfter], but it is counted as [Blocked] and logged at Info level, not as a failure of the
// handler, and it does not pause the pollers. The receive count still grows.
func RetryBlocked(d time.Duration, err error) error { return &BlockedError{After: d, Err: err} }

// DiscardError is the result of [Discard].
type DiscardError struct {
	// Reason says why the message cannot be processed. It is logged.
	Reason string
}

func (e *DiscardError) Error() string { return "worker: discard: " + e.Reason }

// Discard is returned by a handler for a message that is known to be unprocessable and must not
// be retried: the worker deletes it without effect, logs the reason and counts it. Prefer a plain
// error (retries, then the DLQ) whenever in doubt: a discarded message is gone.
func Discard(reason string) error { return &DiscardError{Reason: reason} }

// UnavailableError is the result of [Unavailable].
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return "worker: dependency unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable is returned by a handler when a dependency that every message needs (the
// database) is unreachable. The pollers pause, with growing backoff, so that a database outage
// does not burn the receive counts of the whole queue and send it to the DLQ; the message stays
// in hand, leased by its heartbeat, one such message at a time probes, and the first success ends
// the pause and runs them all again. (On a FIFO queue or with MaxPerGroup the message is retried
// after a delay past the pause instead.)
func Unavailable(err error) error {
	if err == nil {
		err = errors.New("unknown")
	}
	return &UnavailableError{Err: err}
}

// DeploymentError is the result of [BrokenDeployment].
type DeploymentError struct{ Err error }

func (e *DeploymentError) Error() string { return "worker: broken deployment: " + e.Err.Error() }
func (e *DeploymentError) Unwrap() error { return e.Err }

// BrokenDeployment is returned by a handler whose work failed because the deployment is broken,
// not because of the message: a table, column, function or grant that does not exist (the inbox
// handler returns it for those PostgreSQL errors). Every message would fail the same way, so the
// worker pauses its pollers as for [Unavailable] (probing one message at a time until one
// succeeds), logs what it was told once at Error level, and reports it in [State]
// (BrokenDeployment: the readiness check fails at once). The message is not counted as failed
// (it is counted in [BrokenDeployments]) and comes back after the pause.
func BrokenDeployment(err error) error {
	if err == nil {
		err = errors.New("unknown")
	}
	return &DeploymentError{Err: err}
}

// PanicError is the error a panicking handler becomes: its Value is what the handler panicked
// with, its Stack the goroutine's stack at the panic, and Unwrap returns the value if it is an
// error. It is the same type as inbox.PanicError.
type PanicError = panics.Error

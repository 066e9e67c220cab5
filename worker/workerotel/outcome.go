package workerotel

import (
	"context"
	"errors"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Outcomes recorded as sqsinbox.message.outcome.
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate"
	OutcomeBlocked   = "blocked"
	OutcomeRetry     = "retry"
	OutcomeDiscarded = "discarded"
	OutcomeFailed    = "failed"
)

// outcome tells what the worker will do with a message whose handler returned err, with ctx the
// handler's context (whose cause says why it ended, if it did). errType is the error.type of a
// failure, else "".
func outcome(ctx context.Context, err error) (out, errType string) {
	switch {
	case err == nil:
		return OutcomeProcessed, ""
	case errors.Is(err, worker.ErrDuplicate):
		return OutcomeDuplicate, ""
	}
	if _, ok := errors.AsType[*worker.DiscardError](err); ok {
		return OutcomeDiscarded, ""
	}
	if _, ok := errors.AsType[*worker.BlockedError](err); ok {
		return OutcomeBlocked, ""
	}
	if _, ok := errors.AsType[*worker.RetryError](err); ok {
		return OutcomeRetry, ""
	}
	return OutcomeFailed, failureType(ctx, err)
}

// failureType is a low-cardinality name for a failure, for error.type.
func failureType(ctx context.Context, err error) string {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, worker.ErrLeaseLost) || errors.Is(err, worker.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(cause, worker.ErrStopping) || errors.Is(err, worker.ErrStopping):
		return "stopping"
	case errors.Is(cause, worker.ErrHandlerTimeout) || errors.Is(err, worker.ErrHandlerTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	if _, ok := errors.AsType[*worker.UnavailableError](err); ok {
		return "unavailable"
	}
	if _, ok := errors.AsType[*worker.PanicError](err); ok {
		return "panic"
	}
	return "_OTHER"
}

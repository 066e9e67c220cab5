package inboxhandler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Func is the work done for one message, inside the transaction that claims its event. All of its
// database writes must go through tx. It may return the worker's typed results
// ([worker.RetryAfter], [worker.Discard]); any error rolls everything back, the claim included.
type Func func(ctx context.Context, tx pgx.Tx, m *worker.Message) error

// Handler is a [worker.Handler] that runs a [Func] at most once per event key, with an
// [inbox.Inbox]. It also implements [worker.QueueChecker].
type Handler struct {
	ib   *inbox.Inbox
	name string
	key  KeyFunc
	fn   Func
}

// New returns a handler named name (the inbox's handler scope: the same event is processed once
// per name) that takes each message's event key with key, or with [DefaultKey] when key is nil,
// and runs fn in the inbox's transaction.
func New(ib *inbox.Inbox, name string, key KeyFunc, fn Func) (*Handler, error) {
	if ib == nil {
		return nil, errors.New("inboxhandler: inbox is nil")
	}
	if fn == nil {
		return nil, errors.New("inboxhandler: fn is nil")
	}
	if err := inbox.ValidateHandler(name); err != nil {
		return nil, fmt.Errorf("inboxhandler: name: %w", err)
	}
	if key == nil {
		key = DefaultKey
	}
	return &Handler{ib: ib, name: name, key: key, fn: fn}, nil
}

// Handle takes m's key and runs fn once per key. It returns nil when fn's work committed,
// [worker.ErrDuplicate] when the event was processed before, the key's error (which sends the
// message the retry-then-DLQ way) when it has no valid key, and [worker.Unavailable] wrapping
// the error when the database could not be reached or a commit's outcome is unknown: the worker
// then does not delete the message, and pauses its pollers.
func (h *Handler) Handle(ctx context.Context, m *worker.Message) error {
	key, err := h.key(m)
	if err != nil {
		return fmt.Errorf("inboxhandler %s: message %s: %w", h.name, m.ID, err)
	}
	out, err := h.ib.Run(ctx, h.name, key, func(ctx context.Context, tx pgx.Tx) error {
		return h.fn(ctx, tx, m)
	})
	switch {
	case err != nil:
		if ctx.Err() == nil && isUnavailable(err) {
			return worker.Unavailable(err)
		}
		return err
	case out == inbox.Duplicate:
		return worker.ErrDuplicate
	}
	return nil
}

// CheckQueue runs the inbox's start-up checks (migrated schema, durable commits) and refuses a
// retention shorter than the queue's redelivery horizon (its MessageRetentionPeriod, or its
// dead-letter queue's if longer).
func (h *Handler) CheckQueue(ctx context.Context, q *worker.Queue) error {
	if err := h.ib.Check(ctx); err != nil {
		return err
	}
	return h.ib.CheckRetention(q.RedeliveryHorizon())
}

// isUnavailable reports whether err says the database could not be used at all, as opposed to a
// failure of this message's work.
func isUnavailable(err error) bool {
	if errors.Is(err, inbox.ErrCommitUnknown) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutdown, cannot connect now
			pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}

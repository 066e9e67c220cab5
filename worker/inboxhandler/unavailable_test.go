package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// TestUnavailableClassification (real PostgreSQL): a database that cannot be reached is
// reported as worker.Unavailable; the handler's own failures, SQL errors included, are not.
func TestUnavailableClassification(t *testing.T) {
	t.Parallel()
	m := msg(`{"id":"evt_1"}`, nil)

	down, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	ibDown, err := inbox.New(down, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := inboxhandler.New(ibDown, "h", nil, func(context.Context, pgx.Tx, *worker.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var ue *worker.UnavailableError
	if err := h.Handle(context.Background(), m); !errors.As(err, &ue) {
		t.Errorf("database down: Handle = %v, want worker.Unavailable", err)
	}

	b := setup(t, nil)
	for name, fn := range map[string]inboxhandler.Func{
		"handler error": func(context.Context, pgx.Tx, *worker.Message) error { return errors.New("bad order") },
		"sql error": func(ctx context.Context, tx pgx.Tx, _ *worker.Message) error {
			_, err := tx.Exec(ctx, `SELECT * FROM no_such_table`)
			return err
		},
		// The handler's own I/O failures are this message's, not the database's: they must not
		// pause every poller.
		"truncated body": func(context.Context, pgx.Tx, *worker.Message) error {
			return fmt.Errorf("decode order: %w", io.ErrUnexpectedEOF)
		},
		"downstream EOF": func(context.Context, pgx.Tx, *worker.Message) error {
			return fmt.Errorf("call the carrier: %w", io.EOF)
		},
		"downstream timeout": func(context.Context, pgx.Tx, *worker.Message) error {
			return fmt.Errorf("call the carrier: %w", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", IsTimeout: true}})
		},
	} {
		h, err := inboxhandler.New(b.ib, "h-"+name, nil, fn)
		if err != nil {
			t.Fatal(err)
		}
		err = h.Handle(context.Background(), m)
		if err == nil || errors.As(err, &ue) {
			t.Errorf("%s: Handle = %v, want a plain error", name, err)
		}
	}
	h2, err := inboxhandler.New(b.ib, "dup", nil, b.effect)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := h2.Handle(context.Background(), m); !errors.Is(err, worker.ErrDuplicate) {
		t.Errorf("second delivery: Handle = %v, want ErrDuplicate", err)
	}

	// The inbox's own connection ended under the handler: that is the database's failure.
	killed, err := inboxhandler.New(b.ib, "killed", nil, func(ctx context.Context, tx pgx.Tx, _ *worker.Message) error {
		_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Handle(context.Background(), msg(`{"id":"evt_2"}`, nil)); !errors.As(err, &ue) {
		t.Errorf("connection ended under the handler: Handle = %v, want worker.Unavailable", err)
	}
}

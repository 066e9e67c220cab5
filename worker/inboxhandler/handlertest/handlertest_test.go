package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler/handlertest"
)

type orderPaid struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
}

func (e *orderPaid) Validate() error {
	if e.OrderID == "" {
		return errors.New("order_id is missing")
	}
	return nil
}

// pick is the user's handler: one pick task per OrderPaid.
var pick = inboxhandler.JSON(func(ctx context.Context, tx pgx.Tx, _ *worker.Message, e orderPaid) error {
	_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1)`, e.OrderID)
	return err
})

// count returns the number of pick tasks of an order.
func count(t *testing.T, db *inboxtest.DB, orderID string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks WHERE order_id = $1`, orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPickTaskOnce delivers one event five times, three redeliveries and twice in one batch:
// five acks, one pick task. It uses PostgreSQL (inboxtest); no SQS server.
// README: handler-test
func TestPickTaskOnce(t *testing.T) {
	db := inboxtest.New(t, inboxtest.WithSQL(`CREATE TABLE pick_tasks (order_id text NOT NULL)`))
	h, err := inboxhandler.New(db.Inbox, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	m := handlertest.Message(`{"id":"evt_9f3k","order_id":"o-1"}`)
	outs := handlertest.Deliver(t, h, m, 3)                      // redelivered, as the worker runs it
	outs = append(outs, handlertest.DeliverBatch(t, h, m, m)...) // twice in one batch
	want := []handlertest.Outcome{"processed", "duplicate", "duplicate", "duplicate", "duplicate"}
	if got := handlertest.Outcomes(outs); !slices.Equal(got, want) || count(t, db, "o-1") != 1 {
		t.Fatalf("outcomes %v, %d pick tasks; want %v and 1", got, count(t, db, "o-1"), want)
	}
}

// TestOutcomes: a new event id is processed again; a body that does not decode or validate is a
// failure (retried, then the DLQ) and never reaches the function; a missing key fails too; a
// panic fails; a missing table is a broken deployment. OutcomeOf classifies each result as the
// worker does. It uses PostgreSQL (inboxtest); no SQS server.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	db := inboxtest.New(t, inboxtest.WithSQL(`CREATE TABLE pick_tasks (order_id text NOT NULL)`))
	h, err := inboxhandler.New(db.Inbox, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	handlertest.Deliver(t, h, handlertest.Message(`{"id":"evt_1","order_id":"o-2"}`), 2)
	if d := handlertest.Deliver(t, h, handlertest.Message(`{"id":"evt_2","order_id":"o-2"}`), 1); d[0].Outcome != handlertest.Processed {
		t.Errorf("a second event: %v", d)
	}
	if n := count(t, db, "o-2"); n != 2 {
		t.Errorf("%d pick tasks for two events, want 2", n)
	}
	for name, body := range map[string]string{
		"not JSON":             `{"id":"evt_3",`,
		"wrong type":           `{"id":"evt_4","order_id":7}`,
		"fails Validate":       `{"id":"evt_5"}`,
		"no key":               `{"order_id":"o-3"}`, // refused before the handler, for its key
		"the key in attribute": `{"order_id":""}`,
	} {
		m := handlertest.Message(body)
		if name == "the key in attribute" {
			m = handlertest.Message(body, "event_id", "evt_6")
		}
		d := handlertest.Deliver(t, h, m, 1)[0]
		if d.Outcome != handlertest.Failed {
			t.Errorf("%s: %v, want failed", name, d)
		}
		if name != "no key" && name != "not JSON" && !errors.Is(d.Err, inboxhandler.ErrBadBody) {
			t.Errorf("%s: %v, want ErrBadBody", name, d.Err)
		}
	}
	if n := count(t, db, "o-3"); n != 0 {
		t.Errorf("a message without a key had an effect")
	}

	panicky, err := inboxhandler.New(db.Inbox, "panicky", nil, func(context.Context, pgx.Tx, *worker.Message) error {
		panic("boom")
	})
	if err != nil {
		t.Fatal(err)
	}
	var pe *worker.PanicError
	if d := handlertest.Deliver(t, panicky, handlertest.Message(`{"id":"evt_7"}`), 1)[0]; d.Outcome != handlertest.Failed || !errors.As(d.Err, &pe) {
		t.Errorf("a panic: %v, want failed with a *worker.PanicError", d)
	}

	broken, err := inboxhandler.New(db.Inbox, "broken", nil, func(ctx context.Context, tx pgx.Tx, _ *worker.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := handlertest.Deliver(t, broken, handlertest.Message(`{"id":"evt_8"}`), 1)[0]; d.Outcome != handlertest.BrokenDeployment {
		t.Errorf("a missing table: %v, want broken_deployment", d)
	}

	for err, want := range map[error]handlertest.Outcome{
		nil:                                      handlertest.Processed,
		worker.RetryAfter(1):                     handlertest.Retried,
		worker.RetryBlocked(1, nil):              handlertest.Blocked,
		worker.Discard("x"):                      handlertest.Discarded,
		worker.Unavailable(errors.New("db")):     handlertest.Unavailable,
		fmt.Errorf("x: %w", worker.ErrDuplicate): handlertest.Duplicate,
		fmt.Errorf("x: %w", worker.ErrNotRun):    handlertest.Released,
		worker.BrokenDeployment(errors.New("x")): handlertest.BrokenDeployment,
		worker.ErrHandlerTimeout:                 handlertest.Failed,
		errors.New("x"):                          handlertest.Failed,
	} {
		if got := handlertest.OutcomeOf(err); got != want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", err, got, want)
		}
	}
}

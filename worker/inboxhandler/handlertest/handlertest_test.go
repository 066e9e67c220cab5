package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/pgtest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler/handlertest"
)

// These tests use a real PostgreSQL (pgtest) and no SQS server.

var db *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if db, err = pgtest.Start(context.Background(), "handlertest"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	db.Close()
	os.Exit(code)
}

// setupWarehouse stands for the user's own test setup: a pool on a test database, the inbox
// migrated, and their table.
func setupWarehouse(t *testing.T) *inbox.Inbox {
	t.Helper()
	schema := strings.ToLower(fmt.Sprintf("t_%d_%s", os.Getpid(), t.Name()[len("Test"):]))
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema // the user's tables, unqualified
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := inbox.Migrate(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+schema+`.pick_tasks (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

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

func count(t *testing.T, ib *inbox.Inbox, orderID string) int {
	t.Helper()
	var n int
	err := ib.Pool().QueryRow(t.Context(), `SELECT count(*) FROM `+ib.Schema()+`.pick_tasks WHERE order_id = $1`, orderID).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// README: handler-test
func TestPickTaskOnce(t *testing.T) {
	ib := setupWarehouse(t) // your own: a test database, the inbox migrated, your tables
	h, err := inboxhandler.New(ib, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	outs := handlertest.Deliver(t, h, handlertest.Message(`{"id":"evt_9f3k","order_id":"o-1"}`), 5)
	want := []handlertest.Outcome{"processed", "duplicate", "duplicate", "duplicate", "duplicate"}
	if got := handlertest.Outcomes(outs); !slices.Equal(got, want) || count(t, ib, "o-1") != 1 {
		t.Fatalf("outcomes %v, %d pick tasks; want %v and 1", got, count(t, ib, "o-1"), want)
	}
}

// TestOutcomes: a new event id is processed again; a body that does not decode or validate is a
// failure (retried, then the DLQ) and never reaches the function; a missing key fails too.
func TestOutcomes(t *testing.T) {
	ib := setupWarehouse(t)
	h, err := inboxhandler.New(ib, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	hs := h
	handlertest.Deliver(t, hs, handlertest.Message(`{"id":"evt_1","order_id":"o-2"}`), 2)
	if d := handlertest.Deliver(t, hs, handlertest.Message(`{"id":"evt_2","order_id":"o-2"}`), 1); d[0].Outcome != handlertest.Processed {
		t.Errorf("a second event: %v", d)
	}
	if n := count(t, ib, "o-2"); n != 2 {
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
		d := handlertest.Deliver(t, hs, m, 1)[0]
		if d.Outcome != handlertest.Failed {
			t.Errorf("%s: %v, want failed", name, d)
		}
		if name != "no key" && name != "not JSON" && !errors.Is(d.Err, inboxhandler.ErrBadBody) {
			t.Errorf("%s: %v, want ErrBadBody", name, d.Err)
		}
	}
	if n := count(t, ib, "o-3"); n != 0 {
		t.Errorf("a message without a key had an effect")
	}
	for err, want := range map[error]handlertest.Outcome{
		worker.RetryAfter(1):                     handlertest.Retried,
		worker.RetryBlocked(1, nil):              handlertest.Blocked,
		worker.Discard("x"):                      handlertest.Discarded,
		worker.Unavailable(errors.New("db")):     handlertest.Unavailable,
		fmt.Errorf("x: %w", worker.ErrDuplicate): handlertest.Duplicate,
	} {
		if got := handlertest.OutcomeOf(err); got != want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", err, got, want)
		}
	}
}

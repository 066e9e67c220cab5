// Package warehouse is the handler of the OrderPaid story: a paid order goes to PICKING and gets
// one pick task, a box heading for the door. The work runs through the inbox, so a second
// delivery of the same event is deleted without shipping a second box.
package warehouse

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// HandlerName is the handler's name in the inbox.
const HandlerName = "warehouse"

// Schema holds the warehouse's tables: orders and pick_tasks.
const Schema = "warehouse"

// OrderPaid is the event the warehouse consumes.
type OrderPaid struct {
	// ID is the event's id, assigned by the producer (evt_...). It is the inbox key unless the
	// message carries an event_id attribute.
	ID         string `json:"id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"` // in cents
	Currency   string `json:"currency,omitempty"`
}

// Validate checks a decoded OrderPaid: inboxhandler.JSON calls it, and a failure sends the
// message the retry-then-DLQ way.
func (e *OrderPaid) Validate() error {
	if e.OrderID == "" {
		return errors.New("order_id is missing")
	}
	return nil
}

// New returns the worker handler: [Handle] through ib, with the event key taken from the
// message attribute event_id, else the body's id.
func New(ib *inbox.Inbox) (*inboxhandler.Handler, error) {
	return inboxhandler.New(ib, HandlerName, inboxhandler.DefaultKey, Handle)
}

const (
	sqlUpsertOrder = `INSERT INTO warehouse.orders (id, status) VALUES ($1, 'PICKING')
ON CONFLICT (id) DO UPDATE SET status = 'PICKING', updated_at = now()`
	sqlInsertPickTask = `INSERT INTO warehouse.pick_tasks (order_id, event_id) VALUES ($1, $2)`
)

// Handle sets the order to PICKING and creates one pick task, in the inbox's transaction tx.
// Setting the status is idempotent by shape; the pick task is not, which is why it needs the
// inbox. A body that is no valid OrderPaid never gets here: it is retried, then dead-lettered.
var Handle = inboxhandler.JSON(handle)

func handle(ctx context.Context, tx pgx.Tx, _ *worker.Message, e OrderPaid) error {
	key, _, _ := inbox.EventKey(ctx)
	// Both statements go in one round trip.
	b := &pgx.Batch{}
	b.Queue(sqlUpsertOrder, e.OrderID)
	b.Queue(sqlInsertPickTask, e.OrderID, key)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("warehouse: order %s: %w", e.OrderID, err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the warehouse's migrations (its own version table, in schema warehouse) and
// returns the versions applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrate.Up(ctx, pool, migrations, "migrations", Schema, "schema_migrations")
}

// PickTasks returns the number of pick tasks of each order in ids (0 for an order without any).
func PickTasks(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, ids []string) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT o.id, count(t.id)
FROM unnest($1::text[]) AS o(id) LEFT JOIN warehouse.pick_tasks t ON t.order_id = o.id
GROUP BY o.id`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]int, len(ids))
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// Package loyalty gives a customer 50 points per OrderPaid. The increment is idempotent only
// because it runs through the inbox. It consumes the same events as the warehouse under its own
// handler name: each handler deduplicates for itself, so the first to see an event does not
// steal it from the other.
package loyalty

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
const HandlerName = "loyalty"

// Schema holds the loyalty tables.
const Schema = "loyalty"

// PointsPerOrder is what one paid order earns.
const PointsPerOrder = 50

// orderPaid is the part of OrderPaid that loyalty reads.
type orderPaid struct {
	CustomerID string `json:"customer_id"`
}

// New returns the worker handler: [Handle] through ib, with the event key taken from the
// message attribute event_id, else the body's id.
func New(ib *inbox.Inbox) (*inboxhandler.Handler, error) {
	return inboxhandler.New(ib, HandlerName, inboxhandler.DefaultKey, Handle)
}

const sqlAddPoints = `INSERT INTO loyalty.loyalty_accounts (customer_id, points) VALUES ($1, $2)
ON CONFLICT (customer_id) DO UPDATE SET points = loyalty_accounts.points + EXCLUDED.points, updated_at = now()`

// Handle adds PointsPerOrder to the customer's account, in the inbox's transaction tx.
var Handle = inboxhandler.JSON(handle)

func handle(ctx context.Context, tx pgx.Tx, _ *worker.Message, e orderPaid) error {
	if _, err := tx.Exec(ctx, sqlAddPoints, e.CustomerID, PointsPerOrder); err != nil {
		return fmt.Errorf("loyalty: customer %s: %w", e.CustomerID, err)
	}
	return nil
}

// Validate checks that the event names a customer.
func (e *orderPaid) Validate() error {
	if e.CustomerID == "" {
		return errors.New("customer_id is missing")
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the loyalty migrations (their own version table, in schema loyalty) and
// returns the versions applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrate.Up(ctx, pool, migrations, "migrations", Schema, "schema_migrations")
}

// Points returns the points of every customer that has an account.
func Points(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	rows, err := pool.Query(ctx, `SELECT customer_id, points FROM loyalty.loyalty_accounts`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

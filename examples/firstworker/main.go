// Command firstworker is the README's "your first worker": a warehouse handler whose pick task
// is written at most once per OrderPaid event, however often SQS delivers it.
//
//	firstworker migrate       # the inbox's tables and pick_tasks, then exit
//	firstworker               # run until SIGTERM or Ctrl-C
//	firstworker healthcheck   # ask the running worker's /livez (ECS's health check)
package main

import (
	"context"
	"embed"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

func main() {
	// workerapp reads DATABASE_URL and QUEUE_URL (`firstworker -h` lists the rest), runs the
	// subcommand or the worker, and purges inbox rows older than 28 days (longer than any SQS
	// redelivery) while the worker runs. SIGTERM (ECS) or Ctrl-C stops it gracefully.
	workerapp.Main(workerapp.Spec{
		Name:    "warehouse", // the handler's name in the inbox, and the queue's unless QUEUE_URL is set
		Migrate: migrateTables,
		Handler: func(ctx context.Context, d *workerapp.Deps) (worker.Handler, error) {
			// The event key is the event_id attribute, else the body's "id"; the inbox row and
			// the pick task commit in one transaction: nil commits (then the message is
			// deleted), an error rolls back (retried later, then the DLQ).
			return inboxhandler.NewJSON(d.Inbox, "warehouse", func(ctx context.Context, tx pgx.Tx, m *worker.Message, e OrderPaid) error {
				_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1)`, e.OrderID)
				return err
			})
		},
	})
}

// OrderPaid is the event: {"id": "evt_1", "order_id": "o-1", ...}. A body that does not decode,
// or fails Validate, goes the retry-then-DLQ way.
type OrderPaid struct {
	OrderID string `json:"order_id"`
}

// Validate refuses an OrderPaid without an order.
func (e OrderPaid) Validate() error {
	if e.OrderID == "" {
		return errors.New("order_id is missing")
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrateTables applies the worker's own migrations (pick_tasks) after the inbox's: `firstworker
// migrate` runs both.
func migrateTables(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrate.Up(ctx, pool, migrations, "migrations", "public", "firstworker_migrations")
}

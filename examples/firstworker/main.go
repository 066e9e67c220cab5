// Command firstworker is the README's "your first worker": a warehouse handler whose pick task
// is written at most once per OrderPaid event, however often SQS delivers it.
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Say where the database is: DATABASE_URL (postgres://user:password@host:5432/db) or the
	// libpq PG* variables. With neither, pgx would quietly use the local socket's default database.
	if os.Getenv("DATABASE_URL") == "" && os.Getenv("PGHOST") == "" && os.Getenv("PGDATABASE") == "" && os.Getenv("PGSERVICE") == "" {
		log.Fatal("no database: set DATABASE_URL, or PGHOST and PGDATABASE (or PGSERVICE)")
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // run `sqsinbox migrate up` first
	check(err)
	ib, err := inbox.New(pool, nil) // rows kept 28 days: longer than any SQS redelivery
	check(err)
	// The event key is the event_id attribute, else the body's "id"; the inbox row and the pick
	// task commit in one transaction: nil commits (then the message is deleted), an error rolls
	// back (retried later, then the DLQ).
	h, err := inboxhandler.NewJSON(ib, "warehouse", func(ctx context.Context, tx pgx.Tx, m *worker.Message, e OrderPaid) error {
		_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1)`, e.OrderID)
		return err
	})
	check(err)
	awsCfg, err := config.LoadDefaultConfig(ctx) // AWS_REGION, AWS_ENDPOINT_URL_SQS, roles...
	check(err)
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{QueueURL: os.Getenv("QUEUE_URL"), Handler: h})
	check(err)
	// Runs until SIGTERM (ECS) or Ctrl-C; then finishes in-flight work, flushes deletes and
	// releases the rest, within 20 s + 5 s (inside ECS's default stopTimeout of 30 s).
	check(w.Run(ctx))
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

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

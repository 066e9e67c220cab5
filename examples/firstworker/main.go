// Command firstworker is the README's "your first worker": a warehouse handler whose pick task
// is written at most once per OrderPaid event, however often SQS delivers it.
package main

import (
	"context"
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
	pick := func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1::jsonb->>'order_id')`, string(m.Body))
		return err // nil: commit, then delete the message; an error: roll back, retry later
	}
	// The event key is the event_id attribute, else the body's "id"; the inbox row and the pick
	// task commit in one transaction.
	h, err := inboxhandler.New(ib, "warehouse", nil, pick)
	check(err)
	awsCfg, err := config.LoadDefaultConfig(ctx) // AWS_REGION, AWS_ENDPOINT_URL_SQS, roles...
	check(err)
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{QueueURL: os.Getenv("QUEUE_URL"), Handler: h})
	check(err)
	check(w.Start(ctx))
	<-ctx.Done()                        // ECS sends SIGTERM, then waits stopTimeout (30 s)
	check(w.Stop(context.Background())) // finish in-flight work, flush deletes, release the rest
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

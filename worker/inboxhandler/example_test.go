package inboxhandler_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// The warehouse worker of the OrderPaid story: each OrderPaid creates one pick task, however
// often SQS delivers it.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, nil) // after inbox.Migrate (or `sqsinbox migrate up`)
	if err != nil {
		log.Fatal(err)
	}
	h, err := inboxhandler.New(ib, "warehouse", inboxhandler.DefaultKey,
		func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			key, _, _ := inbox.EventKey(ctx) // e.g. evt_9f3k
			_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (event_id, payload) VALUES ($1, $2)`, key, m.Body)
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{
		QueueName:   "order-paid",
		Concurrency: 16,
		Handler:     h, // Start also runs the inbox's checks against the queue
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 28*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}

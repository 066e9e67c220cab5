package outbox_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// The OrderPaid event commits with the order's new status, or not at all.
func ExampleOutbox_Add() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, ""); err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", "order-1"); err != nil {
			return err
		}
		_, err := ob.Add(ctx, tx, outbox.Message{
			Destination: "https://sqs.eu-west-1.amazonaws.com/123456789012/warehouse",
			Body:        `{"type":"OrderPaid","order":"order-1"}`,
			EventID:     "evt_9f3k", // the consumer's inbox key
		})
		return err
	})
	if err != nil {
		log.Fatal(err) // neither the status nor the event committed
	}
}

// A relay publishes what committed; Stop lets the batches in flight finish.
func ExampleRelay() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := outbox.NewRelay(pool, &outbox.RelayConfig{SQS: sqs.NewFromConfig(awsCfg)})
	if err != nil {
		log.Fatal(err)
	}
	if err := rl.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = rl.Stop(ctx) }()
	// ... serve until shutdown ...
}

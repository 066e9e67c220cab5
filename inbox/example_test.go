package inbox_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// The OrderPaid story: the same event delivered twice gives one pick task.
func ExampleInbox_Run() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Check(ctx); err != nil {
		log.Fatal(err)
	}
	pick := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO pick_tasks (order_id) VALUES ($1)", "order-1")
		return err
	}
	for range 2 { // the second delivery of evt_9f3k
		outcome, err := ib.Run(ctx, "warehouse", "evt_9f3k", pick)
		if err != nil {
			log.Fatal(err) // do not delete the message: it comes back and runs again
		}
		fmt.Println(outcome) // processed, then duplicate: delete the message either way
	}
}

// RunTx joins a transaction the caller already has open; the caller commits.
func ExampleInbox_RunTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := inbox.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		outcome, err := ib.RunTx(ctx, tx, "loyalty", "evt_9f3k", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE customers SET points = points + 50 WHERE id = $1", "c-1")
			return err
		})
		if err != nil {
			return err
		}
		fmt.Println(outcome)
		return nil // BeginFunc commits
	})
	if err != nil {
		log.Fatal(err)
	}
}

// StepKey gives a downstream system the same idempotency key on every redelivery.
func ExampleStepKey() {
	fmt.Println(inbox.DeriveStepKey("payments", "evt_9f3k", "charge"))
	// Output: 2fc058011135875badde684bce57bfc3a1be5665493157b2e6efd3e361a117b0
}

func ExampleKeyFromJSONField() {
	key, err := inbox.KeyFromJSONField([]byte(`{"id":"evt_9f3k","order_id":"o-1"}`), "id")
	fmt.Println(key, err)
	_, err = inbox.KeyFromJSONField([]byte(`{"order_id":"o-1"}`), "id")
	fmt.Println(err)
	// Output:
	// evt_9f3k <nil>
	// inbox: invalid event key from JSON field "id": missing
}

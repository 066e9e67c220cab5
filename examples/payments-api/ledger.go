package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// ledgerName is the ledger worker's inbox handler name and its default queue name.
const ledgerName = "payments-ledger"

// ledgerSpec is `payments-api worker`: it books each PaymentCaptured in the ledger, in the
// inbox's transaction, so an event the relay published twice, or SQS delivered twice, is
// booked once. Its key is the event_id attribute the relay puts on every message.
func ledgerSpec() workerapp.Spec {
	return workerapp.Spec{
		Name: ledgerName,
		Migrate: func(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
			return migrateApp(ctx, pool)
		},
		Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) {
			return inboxhandler.New(d.Inbox, ledgerName, nil, book)
		},
	}
}

// book writes the ledger row of one PaymentCaptured, in tx (the inbox's transaction).
func book(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	var ev PaymentCaptured
	if err := json.Unmarshal(m.Body, &ev); err != nil {
		return fmt.Errorf("payments-ledger: not a PaymentCaptured event: %w", err)
	}
	if ev.Type != "PaymentCaptured" || ev.PaymentID == 0 {
		return fmt.Errorf("payments-ledger: not a PaymentCaptured event: %.200s", m.Body)
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+appSchema+".ledger (payment_id, event_id, client_id, amount, currency) VALUES ($1, $2, $3, $4, $5)",
		ev.PaymentID, ev.EventID, ev.ClientID, ev.Amount, ev.Currency)
	return err
}

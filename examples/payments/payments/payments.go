// Package payments charges a payment provider once per OrderPaid and records the charge locally.
//
// The provider's call cannot join the database transaction. So the handler sends the provider an
// Idempotency-Key that every redelivery of the event reproduces: [inbox.StepKey] of the step
// "charge", a hash of the handler's name, the event key and the step. If the process dies (or
// the handler fails) after the provider charged and before the local commit, the inbox rolls
// back, SQS delivers the event again, the handler calls the provider with the same key, the
// provider replays its first response, and the same charge is recorded: one charge in all.
package payments

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/payments/provider"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// HandlerName is the handler's name in the inbox.
const HandlerName = "payments"

// Schema holds the payments table.
const Schema = "payments"

// ChargeStep names the downstream step whose key is sent to the provider.
const ChargeStep = "charge"

// orderPaid is the part of OrderPaid that payments reads.
type orderPaid struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// Handler charges the provider.
type Handler struct {
	provider *provider.Client
}

// New returns the worker handler: a [Handler] on client through ib, with the event key taken
// from the message attribute event_id, else the body's id.
func New(ib *inbox.Inbox, client *provider.Client) (*inboxhandler.Handler, error) {
	if client == nil || client.BaseURL == "" {
		return nil, errors.New("payments: the provider client has no BaseURL")
	}
	h := &Handler{provider: client}
	return inboxhandler.New(ib, HandlerName, inboxhandler.DefaultKey, h.Handle)
}

// Handle charges the order's amount with the step key of "charge" as the Idempotency-Key, then
// records the charge in tx.
func (h *Handler) Handle(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	var e orderPaid
	if err := json.Unmarshal(m.Body, &e); err != nil {
		return fmt.Errorf("OrderPaid: %w", err)
	}
	if e.OrderID == "" || e.Amount <= 0 {
		return errors.New("OrderPaid: order_id or a positive amount is missing")
	}
	if e.Currency == "" {
		e.Currency = "EUR"
	}
	key, err := inbox.StepKey(ctx, ChargeStep)
	if err != nil {
		return err
	}
	ch, _, err := h.provider.Charge(ctx, key, provider.ChargeRequest{
		OrderID: e.OrderID, CustomerID: e.CustomerID, Amount: e.Amount, Currency: e.Currency})
	if err != nil {
		return err // retried with the same key, then the dead-letter queue
	}
	eventKey, _, _ := inbox.EventKey(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO payments.charges (order_id, event_id, charge_id, amount, currency)
VALUES ($1, $2, $3, $4, $5)`, e.OrderID, eventKey, ch.ID, ch.Amount, ch.Currency)
	if err != nil {
		return fmt.Errorf("payments: record charge %s of order %s: %w", ch.ID, e.OrderID, err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the payments migrations (their own version table, in schema payments) and
// returns the versions applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrate.Up(ctx, pool, migrations, "migrations", Schema, "schema_migrations")
}

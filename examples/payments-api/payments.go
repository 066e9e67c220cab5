package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/outbox"
)

type api struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	// events is where PaymentCaptured goes: an SQS queue URL or an SNS topic ARN.
	events string
}

// Payment is the resource, as stored and as answered.
type Payment struct {
	ID        int64     `json:"id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// PaymentCaptured is the event the API writes, through the outbox, for each payment it
// creates. The ledger worker (ledger.go) books it.
type PaymentCaptured struct {
	Type      string `json:"type"` // "PaymentCaptured"
	EventID   string `json:"event_id"`
	PaymentID int64  `json:"payment_id"`
	ClientID  string `json:"client_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

// paymentCapturedID is the event id of the payment a client creates with an Idempotency-Key:
// derived from the two, so every attempt of the request names the same event, and the outbox
// (unique per destination and event id) could never hold a second one.
func paymentCapturedID(client, key string) string {
	sum := sha256.Sum256([]byte(client + "\x00" + key))
	return "payment-captured-" + hex.EncodeToString(sum[:16])
}

// create handles POST /payments. It runs behind the idempotency middleware, which requires a
// key: the INSERT and the PaymentCaptured event (outbox.Add) go through the request's
// transaction, so the payment, its event and the stored response commit together, or none
// does. A validation error is a 422 that is stored and replayed too, with no payment and no
// event.
func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		problem(w, http.StatusBadRequest, "The body must be JSON like {\"amount\": 1250, \"currency\": \"EUR\"}.")
		return
	}
	if in.Amount <= 0 || !currencyCode.MatchString(in.Currency) {
		problem(w, http.StatusUnprocessableEntity, "amount must be a positive integer (minor units) and currency a three-letter ISO 4217 code.")
		return
	}
	ctx := r.Context()
	tx := idempotency.Tx(ctx)
	client := r.Header.Get("X-Client-Id")
	key, _ := idempotency.ParseKey(r.Header.Values(idempotency.HeaderKey)) // the middleware checked it
	p := Payment{Amount: in.Amount, Currency: in.Currency}
	err := tx.QueryRow(ctx,
		"INSERT INTO "+appSchema+".payments (client_id, amount, currency) VALUES ($1, $2, $3) RETURNING id, created_at",
		client, p.Amount, p.Currency).Scan(&p.ID, &p.CreatedAt)
	if err == nil {
		ev := PaymentCaptured{Type: "PaymentCaptured", EventID: paymentCapturedID(client, key), PaymentID: p.ID,
			ClientID: client, Amount: p.Amount, Currency: p.Currency}
		body, _ := json.Marshal(ev)
		_, err = outbox.Add(ctx, tx, outbox.Message{Destination: a.events, EventID: ev.EventID, Body: string(body),
			Attributes: map[string]outbox.Attribute{"type": outbox.StringAttribute(ev.Type)}})
	}
	if err != nil {
		// A 5xx is not stored: the transaction rolls back (the payment and its event with it)
		// and a retry runs again.
		a.log.ErrorContext(ctx, "create payment", "error", err)
		problem(w, http.StatusInternalServerError, "The payment could not be recorded; retry with the same Idempotency-Key.")
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", p.ID))
	writeJSON(w, http.StatusCreated, p)
}

// get handles GET /payments/{id}, for the client that created the payment.
func (a *api) get(w http.ResponseWriter, r *http.Request) {
	client, err := clientID(r)
	if err != nil {
		problem(w, http.StatusUnauthorized, "Send X-Client-Id (a stand-in for authentication).")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		problem(w, http.StatusNotFound, "No such payment.")
		return
	}
	var p Payment
	err = a.pool.QueryRow(r.Context(), "SELECT id, amount, currency, created_at FROM "+appSchema+".payments WHERE id = $1 AND client_id = $2",
		id, client).Scan(&p.ID, &p.Amount, &p.Currency, &p.CreatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		problem(w, http.StatusNotFound, "No such payment.")
	case err != nil:
		a.log.ErrorContext(r.Context(), "get payment", "error", err)
		problem(w, http.StatusServiceUnavailable, "Try again later.")
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func problem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

package main

import (
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
)

type api struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// Payment is the resource, as stored and as answered.
type Payment struct {
	ID        int64     `json:"id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// create handles POST /payments. It runs behind the idempotency middleware, which requires a
// key: the INSERT goes through the request's transaction, so the payment and the stored
// response commit together. A validation error is a 422 that is stored and replayed too.
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
	p := Payment{Amount: in.Amount, Currency: in.Currency}
	err := idempotency.Tx(ctx).QueryRow(ctx,
		"INSERT INTO "+appSchema+".payments (client_id, amount, currency) VALUES ($1, $2, $3) RETURNING id, created_at",
		r.Header.Get("X-Client-Id"), p.Amount, p.Currency).Scan(&p.ID, &p.CreatedAt)
	if err != nil {
		// A 5xx is not stored: the transaction rolls back and a retry runs again.
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

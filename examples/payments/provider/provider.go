// Package provider is a small payment provider for the payments example, in the manner of
// Stripe: POST /v1/charges requires an Idempotency-Key header, and a retry with the same key
// gets the stored response again, byte for byte, with no second charge. A retry with the same
// key and a different request gets 422.
//
// The key's row and the charge are written in one transaction. A concurrent request with the
// same key waits on the key's primary key until the first commits, then replays its response.
package provider

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/migrate"
)

// Schema holds the provider's tables: charges and idempotency_keys.
const Schema = "provider"

// ReplayedHeader is set to "true" on a replayed response, "false" on a fresh one.
const ReplayedHeader = "Idempotent-Replayed"

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"` // in cents
	Currency   string `json:"currency"`
}

// Charge is the provider's answer.
type Charge struct {
	ID         string `json:"id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Status     string `json:"status"`
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the provider's migrations (schema provider) and returns the versions applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrate.Up(ctx, pool, migrations, "migrations", Schema, "schema_migrations")
}

// Handler returns the provider's HTTP API on pool.
func Handler(pool *pgxpool.Pool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) { charge(pool, w, r) })
	return mux
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "title": http.StatusText(status), "detail": detail})
}

func charge(pool *pgxpool.Pool, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		problem(w, http.StatusBadRequest, "an Idempotency-Key header of 1 to 255 characters is required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		problem(w, http.StatusBadRequest, "unreadable body")
		return
	}
	var req ChargeRequest
	if err := json.Unmarshal(body, &req); err != nil || req.OrderID == "" || req.Amount <= 0 || req.Currency == "" {
		problem(w, http.StatusBadRequest, "the body must be a JSON object with order_id, a positive amount and currency")
		return
	}
	sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), body...))
	ctx := r.Context()

	status, resp, replayed, err := chargeOnce(ctx, pool, key, sum[:], req)
	switch {
	case errors.Is(err, errKeyReused):
		problem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request")
		return
	case err != nil:
		slog.ErrorContext(ctx, "provider: charge failed", "error", err)
		problem(w, http.StatusInternalServerError, "try again")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(ReplayedHeader, fmt.Sprint(replayed))
	w.WriteHeader(status)
	_, _ = w.Write(resp)
}

var errKeyReused = errors.New("idempotency key reused with a different request")

// chargeOnce charges once per key and returns the stored response on every later call.
func chargeOnce(ctx context.Context, pool *pgxpool.Pool, key string, hash []byte, req ChargeRequest) (status int, resp []byte, replayed bool, err error) {
	ch := Charge{ID: newChargeID(), OrderID: req.OrderID, CustomerID: req.CustomerID, Amount: req.Amount,
		Currency: req.Currency, Status: "succeeded"}
	resp, _ = json.Marshal(ch)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The key first: a concurrent request with the same key waits here until this commits.
		tag, err := tx.Exec(ctx, `INSERT INTO provider.idempotency_keys (key, request_hash, status, response)
VALUES ($1, $2, 200, $3) ON CONFLICT (key) DO NOTHING`, key, hash, resp)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			replayed = true
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO provider.charges (id, order_id, customer_id, amount, currency)
VALUES ($1, $2, $3, $4, $5)`, ch.ID, ch.OrderID, ch.CustomerID, ch.Amount, ch.Currency)
		return err
	})
	if err != nil {
		return 0, nil, false, err
	}
	if !replayed {
		return http.StatusOK, resp, false, nil
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT request_hash, status, response FROM provider.idempotency_keys WHERE key = $1`, key).
		Scan(&stored, &status, &resp); err != nil {
		return 0, nil, false, err
	}
	if !bytes.Equal(stored, hash) {
		return 0, nil, false, errKeyReused
	}
	return status, resp, true, nil
}

func newChargeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ch_" + hex.EncodeToString(b[:])
}

// Server is the provider listening on a local address.
type Server struct {
	// URL is the server's base URL.
	URL  string
	http *http.Server
	done chan struct{}
}

// Start serves the provider's API on addr ("127.0.0.1:0" for any free port) until Close.
func Start(pool *pgxpool.Pool, addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("provider: listen: %w", err)
	}
	s := &Server{URL: "http://" + l.Addr().String(), done: make(chan struct{}),
		http: &http.Server{Handler: Handler(pool), ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(s.done)
		_ = s.http.Serve(l)
	}()
	return s, nil
}

// Close stops the server, letting requests in progress finish for up to 5 s.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		_ = s.http.Close()
	}
	<-s.done
}

// Client calls the provider.
type Client struct {
	// BaseURL is the provider's base URL, such as http://127.0.0.1:8081.
	BaseURL string
	// HTTP is the HTTP client. nil means a client with a 30 s timeout.
	HTTP *http.Client
}

var defaultHTTP = &http.Client{Timeout: 30 * time.Second}

// StatusError is the provider's refusal of a request.
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string { return fmt.Sprintf("provider: HTTP %d: %s", e.Status, e.Body) }

// Charge charges req once per idempotencyKey: a retry with the same key returns the first
// charge (replayed true) and charges nothing.
func (c *Client) Charge(ctx context.Context, idempotencyKey string, req ChargeRequest) (ch Charge, replayed bool, err error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return ch, false, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", idempotencyKey)
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return ch, false, fmt.Errorf("provider: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ch, false, fmt.Errorf("provider: read the response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return ch, false, &StatusError{Status: resp.StatusCode, Body: string(b)}
	}
	if err := json.Unmarshal(b, &ch); err != nil {
		return ch, false, fmt.Errorf("provider: decode the response: %w", err)
	}
	return ch, resp.Header.Get(ReplayedHeader) == "true", nil
}

package idempotency_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

var (
	db       *pgtest.Server
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	s, err := pgtest.Start(context.Background(), "idem")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db = s
	code := m.Run()
	printBenchTable()
	if pool != nil {
		pool.Close()
	}
	s.Close()
	os.Exit(code)
}

func sharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 60
		pool, poolErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if poolErr != nil {
		t.Fatalf("pool: %v", poolErr)
	}
	return pool
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// migrated creates a fresh schema with the inbox's migrations and a payments table.
func migrated(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	schema := randomName("t_")
	if _, err := inbox.Migrate(ctx, p, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE "+schema+".payments (id bigserial PRIMARY KEY, client text NOT NULL, amount bigint NOT NULL, currency text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return schema
}

func principal(r *http.Request) (string, error) {
	c := r.Header.Get("X-Client-Id")
	if c == "" {
		return "", errors.New("no X-Client-Id")
	}
	return c, nil
}

// app is the handler under test: it inserts a payment in the request's transaction.
type app struct {
	schema string
	calls  atomic.Int64
	// hook, when set, runs after the insert; it returns true when it wrote the response.
	hook func(w http.ResponseWriter, r *http.Request) bool
}

type payment struct {
	ID       int64  `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	At       string `json:"at"`
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	var in payment
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Amount <= 0 {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"title":"Bad Request","status":400,"detail":"amount must be a positive integer","at":%q}`, time.Now().Format(time.RFC3339Nano))
		return
	}
	ctx := r.Context()
	tx := idempotency.Tx(ctx)
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	if err := tx.QueryRow(ctx, "INSERT INTO "+a.schema+".payments (client, amount, currency) VALUES ($1, $2, $3) RETURNING id",
		r.Header.Get("X-Client-Id"), in.Amount, in.Currency).Scan(&in.ID); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if a.hook != nil && a.hook(w, r) {
		return
	}
	in.At = time.Now().Format(time.RFC3339Nano) // differs on every execution
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
	w.Header().Set("X-Not-Replayed", "yes")
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", in.ID))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(in)
}

type bundle struct {
	pool   *pgxpool.Pool
	schema string
	app    *app
	mw     *idempotency.Middleware
	srv    *httptest.Server
}

// setup returns a server running app behind the middleware on a fresh schema. cfg may be nil;
// its Schema and Principal are filled in.
func setup(t *testing.T, cfg *idempotency.Config) *bundle {
	t.Helper()
	return setupOn(t, sharedPool(t), cfg)
}

// setupOn is setup with the middleware on pool p, the schema migrated on the shared pool.
func setupOn(t *testing.T, p *pgxpool.Pool, cfg *idempotency.Config) *bundle {
	t.Helper()
	schema := migrated(t, sharedPool(t))
	var c idempotency.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	if c.Principal == nil {
		c.Principal = principal
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	mw, err := idempotency.New(p, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := mw.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	a := &app{schema: schema}
	mux := http.NewServeMux()
	mux.Handle("/payments", mw.Handler(a))
	mux.Handle("/required", mw.RequireKey(a))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &bundle{pool: p, schema: schema, app: a, mw: mw, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) replayed() bool { return r.header.Get(idempotency.HeaderReplayed) == "true" }

// request is one call: keys are the Idempotency-Key header lines (none when empty).
type request struct {
	method, path, client, body string
	keys                       []string
}

func (b *bundle) do(t testing.TB, rq request) response {
	t.Helper()
	r, err := b.try(context.Background(), rq)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *bundle) try(ctx context.Context, rq request) (response, error) {
	return doURL(ctx, b.srv.URL, rq)
}

func doURL(ctx context.Context, base string, rq request) (response, error) {
	method := rq.method
	if method == "" {
		method = http.MethodPost
	}
	path := rq.path
	if path == "" {
		path = "/payments"
	}
	client := rq.client
	if client == "" {
		client = "client-a"
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewBufferString(rq.body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("X-Client-Id", client)
	for _, k := range rq.keys {
		req.Header.Add(idempotency.HeaderKey, k)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: res.StatusCode, header: res.Header, body: body}, nil
}

func (b *bundle) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+b.schema+"."+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// age moves the stored keys (those the SQL condition where selects, or all when it is empty)
// back in time by the interval by, on the database's clock: their creation and their expiry.
func (b *bundle) age(t testing.TB, by, where string) {
	t.Helper()
	if where == "" {
		where = "true"
	}
	_, err := b.pool.Exec(context.Background(), "UPDATE "+b.schema+".idempotency_keys SET created_at = created_at - $1::interval, "+
		"expires_at = expires_at - $1::interval WHERE "+where, by)
	if err != nil {
		t.Fatal(err)
	}
}

func problemCode(t testing.TB, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var p idempotency.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Detail == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p.Code
}

// eventually polls cond until it returns true or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // a polling interval, not a synchronisation
	}
}

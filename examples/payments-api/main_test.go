package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// The tests run against real servers: PostgreSQL from pgtest (a throwaway cluster, or
// TEST_DATABASE_URL) and an SQS server from sqstest (GoAws, fauxqs with SQSINBOX_TEST_SQS=fauxqs,
// or AWS_ENDPOINT_URL_SQS). The server needs a destination for its events (a queue); the tests
// that follow events through the relay declare it (sqstest.SendBatchResults) and skip on GoAws.
var (
	db     *pgtest.Server
	sqsSrv *sqstest.Server
)

func TestMain(m *testing.M) { exampletest.MainWith(m, "payments_api", &db, &sqsSrv) }

type reply struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, base, client, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if client != "" {
		req.Header.Set("X-Client-Id", client)
	}
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{res.StatusCode, res.Header, b}
}

// TestPaymentsAPI runs the program as its main does: migrate (twice), serve, requests, then a
// graceful stop.
func TestPaymentsAPI(t *testing.T) {
	q := sqsSrv.CreateQueue(t, sqstest.QueueOptions{Prefix: "payments-api"})
	env := map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "EVENTS_DESTINATION": q.URL}
	getenv := func(k string) string { return env[k] }
	log := slog.New(slog.DiscardHandler)
	ctx := t.Context()
	// Twice: the second applies nothing (another test of this binary may have run the first).
	var out bytes.Buffer
	for range 2 {
		out.Reset()
		if err := run(ctx, []string{"migrate"}, getenv, &out, log, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	if want := "inbox (schema sqsinbox): applied []\noutbox (schema sqsinbox): applied []\npayments-api (schema public): applied []\n"; out.String() != want {
		t.Fatalf("the second migrate said:\n%s\nwant:\n%s", out.String(), want)
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if mg, err := appMigrator(pool); err != nil {
		t.Fatal(err)
	} else if v, err := mg.Current(ctx); err != nil || v != 2 {
		t.Fatalf("the example's schema is at version %d (%v), want 2", v, err)
	}
	if err := run(ctx, []string{"bogus"}, getenv, &out, log, nil); !errors.Is(err, errUsage) {
		t.Fatalf("bogus arguments: %v", err)
	}

	srvCtx, stop := context.WithCancel(ctx)
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(srvCtx, nil, getenv, &out, log, func(a net.Addr) { addrs <- a }) }()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}

	body := `{"amount": 1250, "currency": "EUR"}`
	first := post(t, base, "acme", "order-17-payment", body)
	if first.status != http.StatusCreated || first.header.Get("Location") == "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	var p Payment
	if err := json.Unmarshal(first.body, &p); err != nil || p.Amount != 1250 || p.Currency != "EUR" || p.ID == 0 {
		t.Fatalf("payment %s: %v", first.body, err)
	}
	// A burst of retries: each is a replay of the same bytes, or 409 while in flight.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			r := post(t, base, "acme", "order-17-payment", body)
			if r.status != http.StatusCreated || !bytes.Equal(r.body, first.body) || r.header.Get(idempotency.HeaderReplayed) != "true" {
				t.Errorf("retry: %d %v %s", r.status, r.header, r.body)
			}
		})
	}
	wg.Wait()

	for _, tc := range []struct {
		name, client, key, body string
		status                  int
	}{
		{"no key", "acme", "", body, http.StatusBadRequest},
		{"other body", "acme", "order-17-payment", `{"amount": 99, "currency": "EUR"}`, http.StatusUnprocessableEntity},
		{"no client", "", "k", body, http.StatusUnauthorized},
		{"invalid", "acme", "bad-1", `{"amount": -1, "currency": "EUR"}`, http.StatusUnprocessableEntity},
		{"invalid replayed", "acme", "bad-1", `{"amount": -1, "currency": "EUR"}`, http.StatusUnprocessableEntity},
		{"other client, same key", "globex", "order-17-payment", body, http.StatusCreated},
	} {
		r := post(t, base, tc.client, tc.key, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
		if replayed := r.header.Get(idempotency.HeaderReplayed) == "true"; replayed != strings.HasSuffix(tc.name, "replayed") {
			t.Errorf("%s: replayed = %v", tc.name, replayed)
		}
	}

	for client, want := range map[string]int{"": http.StatusUnauthorized, "globex": http.StatusNotFound, "acme": http.StatusOK} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+first.header.Get("Location"), nil)
		if client != "" {
			req.Header.Set("X-Client-Id", client)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("GET as %q: %d, want %d", client, res.StatusCode, want)
		}
	}

	var acme, globex int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE client_id = 'acme'), count(*) FILTER (WHERE client_id = 'globex') FROM public.payments").Scan(&acme, &globex); err != nil {
		t.Fatal(err)
	}
	if acme != 1 || globex != 1 {
		t.Fatalf("payments: acme %d, globex %d; want 1 each", acme, globex)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}

// TestRefusesWithoutDatabase: with neither DATABASE_URL nor a PG* variable that says where the
// database is, the program refuses to start and says what to set; with the PG* variables
// alone it migrates.
func TestRefusesWithoutDatabase(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"nothing set", nil},
		{"port, user and password say nothing of where", map[string]string{"PGPORT": "5432", "PGUSER": "app", "PGPASSWORD": "secret"}},
	} {
		for _, args := range [][]string{nil, {"migrate"}} {
			err := run(t.Context(), args, func(k string) string { return tc.vars[k] }, io.Discard, log, nil)
			if !errors.Is(err, workerapp.ErrNoDatabase) || !strings.Contains(err.Error(), "PGHOST") {
				t.Errorf("%s, args %q: got %v, want workerapp.ErrNoDatabase", tc.name, args, err)
			}
		}
	}

	exampletest.SetPGEnv(t, db.URL)
	if err := run(t.Context(), []string{"migrate"}, os.Getenv, io.Discard, log, nil); err != nil {
		t.Fatalf("migrate with PGHOST, PGPORT, PGDATABASE, PGUSER: %v", err)
	}
}

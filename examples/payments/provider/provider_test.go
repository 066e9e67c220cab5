package provider_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/payments/provider"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// The provider's tests use PostgreSQL from pgtest (a throwaway cluster, or TEST_DATABASE_URL).
var db *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, "provider", &db) }

func setup(t *testing.T) *provider.Client {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := provider.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	s, err := provider.Start(pool, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &provider.Client{BaseURL: s.URL}
}

func TestReplay(t *testing.T) {
	c := setup(t)
	req := provider.ChargeRequest{OrderID: "ord_1", CustomerID: "cus_1", Amount: 4999, Currency: "EUR"}
	first, replayed, err := c.Charge(t.Context(), "key-replay", req)
	if err != nil || replayed {
		t.Fatalf("first charge: %+v, replayed %v, %v", first, replayed, err)
	}
	again, replayed, err := c.Charge(t.Context(), "key-replay", req)
	if err != nil || !replayed || again != first {
		t.Fatalf("retry: %+v, replayed %v, %v; want %+v replayed", again, replayed, err, first)
	}
	other, _, err := c.Charge(t.Context(), "key-other", req)
	if err != nil || other.ID == first.ID {
		t.Fatalf("a new key gave %+v, %v; want a new charge", other, err)
	}
}

func TestConcurrentSameKey(t *testing.T) {
	c := setup(t)
	req := provider.ChargeRequest{OrderID: "ord_2", CustomerID: "cus_1", Amount: 100, Currency: "EUR"}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	fresh := make([]bool, 8)
	for i := range ids {
		wg.Go(func() {
			ch, replayed, err := c.Charge(t.Context(), "key-concurrent", req)
			if err != nil {
				t.Error(err)
			}
			ids[i], fresh[i] = ch.ID, !replayed
		})
	}
	wg.Wait()
	n := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Errorf("call %d got charge %s, call 0 got %s", i, ids[i], ids[0])
		}
		if fresh[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d fresh charges, want 1", n)
	}
}

func TestRefusals(t *testing.T) {
	c := setup(t)
	req := provider.ChargeRequest{OrderID: "ord_3", CustomerID: "cus_1", Amount: 100, Currency: "EUR"}
	if _, _, err := c.Charge(t.Context(), "key-refusals", req); err != nil {
		t.Fatal(err)
	}
	req.Amount = 200
	_, _, err := c.Charge(t.Context(), "key-refusals", req)
	var se *provider.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnprocessableEntity {
		t.Errorf("same key, different request: %v; want 422", err)
	}
	resp, err := http.Post(c.BaseURL+"/v1/charges", "application/json", strings.NewReader(`{"order_id":"x","amount":1,"currency":"EUR"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no Idempotency-Key: HTTP %d, want 400", resp.StatusCode)
	}
}

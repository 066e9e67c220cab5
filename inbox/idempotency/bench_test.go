package idempotency_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

// benchResults holds req/s by "kind/c=N/mode", the last (longest) run of each, for the table
// TestMain prints after the benchmarks.
var (
	benchMu      sync.Mutex
	benchResults = map[string]float64{}
)

// benchHandler is the same handler with and without the middleware: it inserts a payment in
// the request's transaction, or in one of its own when there is none.
func benchHandler(p *pgxpool.Pool, schema string) http.Handler {
	insert := "INSERT INTO " + schema + ".payments (client, amount, currency) VALUES ($1, $2, $3) RETURNING id"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx := idempotency.Tx(ctx)
		var own pgx.Tx
		if tx == nil {
			var err error
			if own, err = p.Begin(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			defer func() { _ = own.Rollback(context.WithoutCancel(ctx)) }()
			tx = own
		}
		var id int64
		if err := tx.QueryRow(ctx, insert, "bench", 1250, "EUR").Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if own != nil {
			if err := own.Commit(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"amount":1250,"currency":"EUR"}`, id)
	})
}

// BenchmarkHTTP measures requests/second through a real HTTP server and PostgreSQL, for first
// attempts (a new key each) and replays (one stored key), at concurrency 1, 8 and 32, with and
// without the middleware, alternating the two in bursts. Without it, a "replay" runs the
// handler again: that is what a retry costs an API with no idempotency. b.N requests are sent
// in each mode. Compare the ratios printed at the end, not the absolute figures.
func BenchmarkHTTP(b *testing.B) {
	p := sharedPool(b)
	schema := migrated(b, p)
	mw, err := idempotency.New(p, &idempotency.Config{Schema: schema, Principal: principal,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	h := benchHandler(p, schema)
	mux := http.NewServeMux()
	mux.Handle("/with", mw.Handler(h))
	mux.Handle("/without", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	post := func(path, key string) error {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(payBody))
		req.Header.Set("X-Client-Id", "bench")
		req.Header.Set(idempotency.HeaderKey, key)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	}
	if err := post("/with", "replayed"); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	// burst sends n requests over c connections at once and returns how long they took.
	burst := func(kind, mode string, c, n int) (time.Duration, error) {
		var next atomic.Int64
		var failed atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for range c {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					key := "replayed"
					if kind == "first" {
						key = fmt.Sprintf("k-%d", seq.Add(1))
					}
					if err := post("/"+mode, key); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		err, _ := failed.Load().(error)
		return time.Since(start), err
	}
	for _, kind := range []string{"first", "replay"} {
		for _, c := range []int{1, 8, 32} {
			name := fmt.Sprintf("%s/c=%d", kind, c)
			b.Run(name, func(b *testing.B) {
				// The two modes alternate in short bursts, so both see the same load from
				// whatever else runs on the machine.
				chunk := max(4*c, 50)
				spent := map[string]time.Duration{}
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					for _, mode := range []string{"without", "with"} {
						d, err := burst(kind, mode, c, n)
						if err != nil {
							b.Fatal(err)
						}
						spent[mode] += d
					}
				}
				wo := float64(b.N) / spent["without"].Seconds()
				wi := float64(b.N) / spent["with"].Seconds()
				b.ReportMetric(wo, "req/s-without")
				b.ReportMetric(wi, "req/s-with")
				b.ReportMetric(wi/wo, "ratio")
				benchMu.Lock()
				benchResults[name+"/without"] = wo
				benchResults[name+"/with"] = wi
				benchMu.Unlock()
			})
		}
	}
}

func printBenchTable() {
	benchMu.Lock()
	defer benchMu.Unlock()
	if len(benchResults) == 0 {
		return
	}
	fmt.Fprintln(os.Stdout, "\nHTTP Idempotency-Key middleware, req/s (same run; compare ratios):")
	fmt.Fprintf(os.Stdout, "%-8s %4s %14s %14s %8s\n", "kind", "c", "without", "with", "ratio")
	for _, kind := range []string{"first", "replay"} {
		for _, c := range []int{1, 8, 32} {
			wo := benchResults[fmt.Sprintf("%s/c=%d/without", kind, c)]
			wi := benchResults[fmt.Sprintf("%s/c=%d/with", kind, c)]
			if wo == 0 || wi == 0 {
				continue
			}
			fmt.Fprintf(os.Stdout, "%-8s %4d %14.0f %14.0f %8.2f\n", kind, c, wo, wi, wi/wo)
		}
	}
}

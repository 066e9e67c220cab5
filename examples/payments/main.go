// Command payments charges a payment provider once per OrderPaid, with an Idempotency-Key that
// every redelivery reproduces, and records the charge in the inbox's transaction.
//
//	payments migrate   # the inbox's tables, payments.charges and the local provider's tables
//	payments           # run until SIGTERM or SIGINT
//
// With PROVIDER_URL unset it starts the local provider (package provider) on PROVIDER_ADDR
// (default 127.0.0.1:0, any free port).
package main

import (
	"cmp"
	"context"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/payments/payments"
	"github.com/sqsinbox/sqsinbox/examples/payments/provider"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

func main() { workerapp.Main(newSpec(nil)) }

// newSpec returns the example; httpClient (nil for the default) calls the provider.
func newSpec(httpClient *http.Client) workerapp.Spec {
	return workerapp.Spec{
		Name: payments.HandlerName,
		Migrate: func(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
			if _, err := provider.Migrate(ctx, pool); err != nil {
				return nil, err
			}
			return payments.Migrate(ctx, pool)
		},
		Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) {
			url := d.Getenv("PROVIDER_URL")
			if url == "" {
				p, err := provider.Start(d.Pool, cmp.Or(d.Getenv("PROVIDER_ADDR"), "127.0.0.1:0"))
				if err != nil {
					return nil, err
				}
				d.OnStop(p.Close)
				d.Logger.Info("payments: started the local payment provider", "url", p.URL)
				url = p.URL
			}
			return payments.New(d.Inbox, &provider.Client{BaseURL: url, HTTP: httpClient})
		},
	}
}

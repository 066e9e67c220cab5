package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// benchTracing is what -otel adds to the worker runs: a tracer provider that samples every
// message and batches its spans to an exporter that drops them, so that the runs pay for making,
// ending and queueing the spans as a traced service does, but not for shipping them.
type benchTracing struct {
	tp  *sdktrace.TracerProvider
	cfg *workerotel.Config
	ib  *inbox.Inbox // the bench's inbox with workerotel.InboxHooks
}

func newBenchTracing(pool *pgxpool.Pool) (*benchTracing, error) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discardExporter{}))
	cfg := &workerotel.Config{TracerProvider: tp}
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Hooks: workerotel.InboxHooks(cfg)})
	if err != nil {
		_ = tp.Shutdown(context.Background())
		return nil, err
	}
	return &benchTracing{tp: tp, cfg: cfg, ib: ib}, nil
}

// wrap traces h, the handler of the queue at url.
func (t *benchTracing) wrap(url string, h worker.Handler) worker.Handler {
	return workerotel.Middleware(url, t.cfg)(h)
}

func (t *benchTracing) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.tp.Shutdown(ctx)
}

// discardExporter drops the spans it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

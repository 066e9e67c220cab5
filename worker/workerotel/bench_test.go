package workerotel_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// variant is one way of doing the same work, measured against the first of its table.
type variant struct {
	name string
	op   func() // one operation
}

// compare measures the variants interleaved, block operations of each in turn, for parts
// parts of about d each, so that drift in the machine's load (other tests, other processes)
// hits them alike. It prints the mean ns/op, the ns added to the first variant's, allocs/op,
// the ratio to the first, and the lowest and highest ratio of a part; and reports the ratios as
// metrics. (testing.Benchmark cannot run inside a benchmark, hence the loop of its own.)
func compare(b *testing.B, title string, d time.Duration, parts, block int, vs []variant) {
	total := make([]time.Duration, len(vs))
	ops := 0
	lo, hi := make([]float64, len(vs)), make([]float64, len(vs))
	for p := range parts {
		part := make([]time.Duration, len(vs))
		for start := time.Now(); time.Since(start) < d; {
			for i, v := range vs {
				t0 := time.Now()
				for range block {
					v.op()
				}
				part[i] += time.Since(t0)
			}
			ops += block
		}
		for i := range vs {
			total[i] += part[i]
			if r := float64(part[i]) / float64(part[0]); p == 0 {
				lo[i], hi[i] = r, r
			} else {
				lo[i], hi[i] = min(lo[i], r), max(hi[i], r)
			}
		}
	}
	fmt.Fprintf(os.Stdout, "\n%s (%d ops each, interleaved in blocks of %d, GOMAXPROCS=%d)\n%-34s %10s %10s %10s %7s %12s\n",
		title, ops, block, runtime.GOMAXPROCS(0), "variant", "ns/op", "added ns", "allocs/op", "ratio", "part range")
	base := float64(total[0].Nanoseconds()) / float64(ops)
	for i, v := range vs {
		ns := float64(total[i].Nanoseconds()) / float64(ops)
		fmt.Fprintf(os.Stdout, "%-34s %10.0f %10.0f %10.1f %7.2f %12s\n", v.name, ns, ns-base, testing.AllocsPerRun(50, v.op),
			ns/base, fmt.Sprintf("%.2f-%.2f", lo[i], hi[i]))
		if i > 0 {
			b.ReportMetric(ns/base, "ratio-"+strings.ReplaceAll(v.name, " ", "_"))
		}
	}
}

// BenchmarkMiddleware measures the middleware around a handler that does nothing, on a message
// that carries a traceparent: the cost of tracing per message, against no middleware at all.
// Spans go through a batch span processor to an exporter that drops them, as in production
// minus the network.
func BenchmarkMiddleware(b *testing.B) {
	m := message(map[string]string{"traceparent": producerTraceparent, "event_id": "evt_9f3k"}, nil)
	unsampled := message(map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}, nil)
	nothing := worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	loop := func(h worker.Handler, m *worker.Message) func() {
		ctx := context.Background()
		return func() { _ = h.Handle(ctx, m) }
	}
	withTP := func(tp trace.TracerProvider) worker.Handler {
		return workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(nothing)
	}
	compare(b, "middleware around a no-op handler", time.Second, 5, 1000, []variant{
		{"off (no middleware)", loop(nothing, m)},
		{"noop tracer provider", loop(withTP(noop.NewTracerProvider()), m)},
		{"SDK, producer sampled", loop(withTP(tp), m)},
		{"SDK, producer not sampled", loop(withTP(tp), unsampled)},
	})
}

// BenchmarkInboxTracingPG measures the inbox handler (claim, a function that does nothing,
// commit; one connection to PostgreSQL on this machine) on messages that carry a traceparent:
// without tracing, inside the middleware's span, and inside it with InboxHooks recording the
// claim and commit spans. Each message is a new event.
func BenchmarkInboxTracingPG(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &workerotel.Config{TracerProvider: tp}
	plain, _, _ := newInbox(b, inbox.Config{})
	hooked, _, _ := newInbox(b, inbox.Config{Hooks: workerotel.InboxHooks(cfg)})
	handler := func(ib *inbox.Inbox) worker.Handler {
		h, err := inboxhandler.New(ib, "bench", nil, func(context.Context, pgx.Tx, *worker.Message) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	n := 0
	loop := func(h worker.Handler) func() {
		ctx := context.Background()
		return func() {
			n++
			m := message(map[string]string{"traceparent": producerTraceparent}, nil)
			m.Body = []byte(`{"id":"evt_` + strconv.Itoa(n) + `"}`)
			if err := h.Handle(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	compare(b, "inbox handler, a new event per message", 2*time.Second, 5, 1, []variant{
		{"off (no middleware, Hooks nil)", loop(handler(plain))},
		{"middleware, Hooks nil", loop(workerotel.Middleware("orders", cfg)(handler(plain)))},
		{"middleware and InboxHooks", loop(workerotel.Middleware("orders", cfg)(handler(hooked)))},
	})
}

package workerotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// TestOutboxPropagate (no server): inside a span the headers carry its trace and span ids;
// outside one, none.
func TestOutboxPropagate(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	prop := workerotel.OutboxPropagate(propagation.TraceContext{})
	if h := prop(context.Background()); len(h) != 0 {
		t.Errorf("outside a span: %v, want nothing", h)
	}
	ctx, span := tp.Tracer("t").Start(context.Background(), "add order")
	defer span.End()
	h := prop(ctx)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if h["traceparent"] != want {
		t.Errorf("traceparent %q, want %q", h["traceparent"], want)
	}
}

package workerotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqsinbox/sqsinbox/worker/workerotel/workeroteltest"
)

// newTracing returns a tracer provider that exports every span, as it ends, to the returned
// in-memory exporter.
func newTracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(context.Background())) })
	return tp, exp
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs fails unless span s has each of want (values compared as strings).
func wantAttrs(t testing.TB, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[k]; !ok || g.String() != v {
			t.Errorf("span %q: %s = %q (present %v), want %q", s.Name, k, g.String(), ok, v)
		}
	}
}

// byName, children and spanTree are workeroteltest's, which cmd/sqsinbox's trace test shares.
var (
	byName   = workeroteltest.ByName
	children = workeroteltest.Children
	spanTree = workeroteltest.SpanTree
)

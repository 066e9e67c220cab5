package workerotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans and metrics this package records.
const ScopeName = "github.com/sqsinbox/sqsinbox/worker/workerotel"

// Config configures the spans of [Middleware] and [InboxHooks]. The zero value is valid and
// gives the defaults.
type Config struct {
	// TracerProvider makes the spans. nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// Propagator reads the producer's context from a message's attributes. nil means W3C trace
	// context and baggage (traceparent, tracestate, baggage), whatever the global propagator is.
	Propagator propagation.TextMapPropagator

	// OmitEventKey, when true, keeps the inbox's event key off the spans. The key is the
	// producer's id of the event (evt_9f3k), which is what makes a duplicate easy to explain;
	// but a key taken from a body field can hold personal data. Default false: recorded.
	OmitEventKey bool
}

// defaultPropagator is Config.Propagator's default.
var defaultPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func (c *Config) tracer() trace.Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

func (c *Config) propagator() propagation.TextMapPropagator {
	if c.Propagator == nil {
		return defaultPropagator
	}
	return c.Propagator
}

func configOrZero(cfg *Config) *Config {
	if cfg == nil {
		return &Config{}
	}
	c := *cfg
	return &c
}

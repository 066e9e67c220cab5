// Package idemotel records the requests of the Idempotency-Key middleware
// ([github.com/sqsinbox/sqsinbox/inbox/idempotency]) as OpenTelemetry spans. It is apart from
// workerotel so that an HTTP service links neither the worker nor the SQS SDK.
//
//	mw, err := idempotency.New(pool, &idempotency.Config{Principal: clientOf, Hooks: idemotel.Hooks(nil)})
//
// Each request that carries an Idempotency-Key (or lacks one where it is required) gets a span
// "idempotency <method> <route pattern>", a child of the request's span (an otelhttp server
// span, say), with the handler's spans inside it. Its attributes:
//
//   - sqsinbox.idempotency.outcome: first_attempt, replay, conflict (409), mismatch (422),
//     missing_key (400), rejected (a malformed key, no principal, a body too large) or error
//     ([idempotency.Outcome])
//   - sqsinbox.idempotency.stored: whether a first attempt's response was stored and committed
//   - http.response.status_code: the status sent
//
// A 5xx, or a first attempt the middleware failed to store, has status Error. The key is never
// recorded: it can hold personal data, and the table stores only its hash.
package idemotel

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

// ScopeName is the instrumentation scope of the spans this package records.
const ScopeName = "github.com/sqsinbox/sqsinbox/inbox/idempotency/idemotel"

// Attribute keys of the spans.
const (
	// KeyOutcome is what the middleware did with the request.
	KeyOutcome = attribute.Key("sqsinbox.idempotency.outcome")
	// KeyStored is whether a first attempt's response was stored and committed.
	KeyStored = attribute.Key("sqsinbox.idempotency.stored")
)

// Hooks returns hooks for idempotency.Config.Hooks that record a span per request, made by tp
// (otel.GetTracerProvider() when nil).
func Hooks(tp trace.TracerProvider) *idempotency.Hooks {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
	return &idempotency.Hooks{
		Start: func(ctx context.Context, a *idempotency.Attempt) context.Context {
			ctx, _ = t.Start(ctx, spanName(a.Request), trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(a.Request.Method)))
			return ctx
		},
		Done: func(ctx context.Context, a *idempotency.Attempt) {
			span := trace.SpanFromContext(ctx)
			span.SetAttributes(KeyOutcome.String(string(a.Outcome)))
			if a.Outcome == idempotency.OutcomeFirst {
				span.SetAttributes(KeyStored.Bool(a.Stored))
			}
			if a.Status != 0 {
				span.SetAttributes(semconv.HTTPResponseStatusCode(a.Status))
			}
			switch {
			case a.Err != nil:
				span.RecordError(a.Err)
				span.SetStatus(codes.Error, a.Err.Error())
			case a.Status >= http.StatusInternalServerError:
				span.SetStatus(codes.Error, http.StatusText(a.Status))
			}
			span.End()
		},
	}
}

// spanName is "idempotency <method> <pattern>", with the route pattern that http.ServeMux
// matched when there is one; never the path, which can hold ids.
func spanName(r *http.Request) string {
	switch {
	case r.Pattern == "":
		return "idempotency " + r.Method
	case strings.HasPrefix(r.Pattern, r.Method+" "):
		return "idempotency " + r.Pattern
	}
	return "idempotency " + r.Method + " " + r.Pattern
}

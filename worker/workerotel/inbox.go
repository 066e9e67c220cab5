package workerotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// Attribute keys of the inbox's spans.
const (
	// KeyInboxHandler is the inbox handler an event is claimed for.
	KeyInboxHandler = attribute.Key("sqsinbox.inbox.handler")
	// KeyInboxEventKey is the event key (unless Config.OmitEventKey).
	KeyInboxEventKey = attribute.Key("sqsinbox.inbox.event_key")
	// KeyInboxOutcome is how a claim or commit ended: fresh, duplicate, blocked, committed,
	// unknown or failed ([inbox.StepOutcome]).
	KeyInboxOutcome = attribute.Key("sqsinbox.inbox.outcome")
	// KeyInboxClaim is the claim's outcome, on the span the claim's span is a child of (the
	// message's).
	KeyInboxClaim = attribute.Key("sqsinbox.inbox.claim")
	// KeyInboxInTx is true on the claim of inbox.RunTx, made in the caller's transaction.
	KeyInboxInTx = attribute.Key("sqsinbox.inbox.in_tx")
)

// InboxHooks returns hooks for inbox.Config.Hooks that record each claim and commit as a span
// ("inbox claim", "inbox commit") that is a child of the span in the context given to Run (the
// message's span, under [Middleware]). Each carries the handler, the event key, and how the step
// ended; a failed step has status Error and, for a PostgreSQL error, db.response.status_code
// (its SQLSTATE). The claim's outcome, handler and key are also set on the parent span, so that
// the message's span says at once why it was a duplicate.
func InboxHooks(cfg *Config) *inbox.Hooks {
	c := configOrZero(cfg)
	t := c.tracer()
	omitKey := c.OmitEventKey
	stepAttrs := func(s *inbox.StepInfo) []attribute.KeyValue {
		attrs := []attribute.KeyValue{KeyInboxHandler.String(s.Handler)}
		if !omitKey {
			attrs = append(attrs, KeyInboxEventKey.String(s.Key))
		}
		return attrs
	}
	return &inbox.Hooks{
		Start: func(ctx context.Context, s *inbox.StepInfo) context.Context {
			attrs := stepAttrs(s)
			if s.InTx {
				attrs = append(attrs, KeyInboxInTx.Bool(true))
			}
			if s.Step == inbox.StepClaim {
				ctx = context.WithValue(ctx, parentKey{}, trace.SpanFromContext(ctx))
			}
			ctx, _ = t.Start(ctx, "inbox "+string(s.Step), trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(attrs...))
			return ctx
		},
		Done: func(ctx context.Context, s *inbox.StepInfo) {
			span := trace.SpanFromContext(ctx)
			span.SetAttributes(KeyInboxOutcome.String(string(s.Outcome)))
			if s.SQLState != "" {
				span.SetAttributes(semconv.DBResponseStatusCode(s.SQLState))
			}
			if s.Outcome == inbox.StepFailed || s.Outcome == inbox.CommitUnknown {
				span.RecordError(s.Err)
				span.SetStatus(codes.Error, s.Err.Error())
			}
			span.End()
			if parent, ok := ctx.Value(parentKey{}).(trace.Span); ok {
				parent.SetAttributes(append(stepAttrs(s), KeyInboxClaim.String(string(s.Outcome)))...)
			}
		},
	}
}

// parentKey holds, in the context of a claim's span, the span it is a child of.
type parentKey struct{}

package workerotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// message returns a received message with the given attributes, as the worker passes it.
func message(attrs map[string]string, system map[string]string) *worker.Message {
	m := &worker.Message{ID: "0a1b2c3d-msg", Body: []byte(`{"id":"evt_9f3k"}`), ReceiveCount: 2,
		Attributes: map[string]types.MessageAttributeValue{}, SystemAttributes: system}
	for k, v := range attrs {
		workerotel.AttributeCarrier(m.Attributes).Set(k, v)
	}
	return m
}

const (
	producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	xrayHeader          = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
)

// TestMiddlewareOutcomes: each kind of handler result becomes its outcome on the span, failures
// with status Error and error.type.
func TestMiddlewareOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		cause    error // the handler context's cancellation cause
		outcome  string
		errType  string
		extraKey attribute.Key
		extra    string
	}{
		{name: "nil", outcome: "processed"},
		{name: "duplicate", err: worker.ErrDuplicate, outcome: "duplicate"},
		{name: "wrapped duplicate", err: fmt.Errorf("inbox: %w", worker.ErrDuplicate), outcome: "duplicate"},
		{name: "blocked", err: worker.RetryBlocked(time.Minute, errors.New("held")), outcome: "blocked",
			extraKey: workerotel.KeyRetryAfter, extra: "60"},
		{name: "retry", err: worker.RetryAfter(30 * time.Second), outcome: "retry", extraKey: workerotel.KeyRetryAfter, extra: "30"},
		{name: "discard", err: worker.Discard("unknown schema"), outcome: "discarded",
			extraKey: workerotel.KeyDiscardReason, extra: "unknown schema"},
		{name: "unavailable", err: worker.Unavailable(errors.New("db down")), outcome: "failed", errType: "unavailable"},
		{name: "plain error", err: errors.New("boom"), outcome: "failed", errType: "_OTHER"},
		{name: "timeout", err: context.DeadlineExceeded, cause: worker.ErrHandlerTimeout, outcome: "failed", errType: "timeout"},
		{name: "lease lost", err: context.Canceled, cause: worker.ErrLeaseLost, outcome: "failed", errType: "lease_lost"},
		{name: "stopping", err: context.Canceled, cause: worker.ErrStopping, outcome: "failed", errType: "stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, exp := newTracing(t)
			h := workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(
				worker.HandlerFunc(func(context.Context, *worker.Message) error { return tc.err }))
			ctx := t.Context()
			if tc.cause != nil {
				c, cancel := context.WithCancelCause(ctx)
				cancel(tc.cause)
				ctx = c
			}
			if err := h.Handle(ctx, message(nil, nil)); !errors.Is(err, tc.err) {
				t.Fatalf("Handle = %v, want the handler's own %v", err, tc.err)
			}
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name != "process orders" || s.SpanKind != trace.SpanKindConsumer {
				t.Errorf("span %q kind %v, want \"process orders\", consumer", s.Name, s.SpanKind)
			}
			want := map[attribute.Key]string{
				"messaging.system": "aws_sqs", "messaging.operation.name": "process", "messaging.operation.type": "process",
				"messaging.destination.name": "orders", "messaging.message.id": "0a1b2c3d-msg",
				"sqsinbox.message.receive_count": "2", "sqsinbox.message.outcome": tc.outcome,
			}
			if tc.extraKey != "" {
				want[tc.extraKey] = tc.extra
			}
			if tc.errType != "" {
				want["error.type"] = tc.errType
			} else if _, ok := attrs(s)["error.type"]; ok {
				t.Errorf("error.type set on a %s span", tc.outcome)
			}
			wantAttrs(t, s, want)
			if failed := s.Status.Code == codes.Error; failed != (tc.errType != "") {
				t.Errorf("status %v for outcome %s", s.Status.Code, tc.outcome)
			}
		})
	}
}

// TestMiddlewareContinuesProducerTrace: the span's parent is the producer's span, from the
// traceparent attribute, else from the AWSTraceHeader system attribute; with both, the X-Ray
// context is a link. Baggage comes through too.
func TestMiddlewareContinuesProducerTrace(t *testing.T) {
	t.Parallel()
	w3c := "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7"
	xray := "5759e988bd862e3fe1be46a994272793/53995c3f42cd8ad8"
	for _, tc := range []struct {
		name         string
		attrs        map[string]string
		system       map[string]string
		parent, link string // trace/span ids, "" for none
	}{
		{name: "none"},
		{name: "traceparent", attrs: map[string]string{"traceparent": producerTraceparent}, parent: w3c},
		{name: "AWSTraceHeader", system: map[string]string{"AWSTraceHeader": xrayHeader}, parent: xray},
		{name: "both", attrs: map[string]string{"traceparent": producerTraceparent},
			system: map[string]string{"AWSTraceHeader": xrayHeader}, parent: w3c, link: xray},
		{name: "both the same", attrs: map[string]string{"traceparent": "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"},
			system: map[string]string{"AWSTraceHeader": xrayHeader}, parent: xray},
		{name: "malformed traceparent, X-Ray", attrs: map[string]string{"traceparent": "00-zz-00-01"},
			system: map[string]string{"AWSTraceHeader": xrayHeader}, parent: xray},
		{name: "malformed AWSTraceHeader", system: map[string]string{"AWSTraceHeader": "Root=1-xyz;Parent=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, exp := newTracing(t)
			var inner trace.SpanContext
			h := workerotel.Middleware("https://sqs.eu-west-1.amazonaws.com/123456789012/orders", &workerotel.Config{TracerProvider: tp})(
				worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error {
					inner = trace.SpanContextFromContext(ctx)
					return nil
				}))
			if err := h.Handle(t.Context(), message(tc.attrs, tc.system)); err != nil {
				t.Fatal(err)
			}
			s := exp.GetSpans()[0]
			if !inner.Equal(s.SpanContext) {
				t.Errorf("the handler's context holds %v, want the process span %v", inner, s.SpanContext)
			}
			wantAttrs(t, s, map[attribute.Key]string{"messaging.destination.name": "orders",
				"aws.sqs.queue.url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"})
			if got := ids(s.Parent); got != tc.parent && (tc.parent != "" || s.Parent.IsValid()) {
				t.Errorf("parent %s, want %q", got, tc.parent)
			}
			if tc.parent != "" && (!s.Parent.IsRemote() || s.SpanContext.TraceID() != s.Parent.TraceID()) {
				t.Errorf("parent %v remote %v, span's trace %v: not a child of the producer's span", s.Parent, s.Parent.IsRemote(), s.SpanContext.TraceID())
			}
			var links []string
			for _, l := range s.Links {
				links = append(links, ids(l.SpanContext))
			}
			if want := []string{tc.link}; (tc.link == "" && len(links) != 0) || (tc.link != "" && fmt.Sprint(links) != fmt.Sprint(want)) {
				t.Errorf("links %v, want %q", links, tc.link)
			}
		})
	}
}

func ids(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String() + "/" + sc.SpanID().String()
}

// TestMiddlewareRespectsSampling: a producer that did not sample its trace (flags 00, or X-Ray
// Sampled=0) gets no span recorded under the default parent-based sampler, but the handler's
// context still carries the trace.
func TestMiddlewareRespectsSampling(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	var inner trace.SpanContext
	h := workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(
		worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error {
			inner = trace.SpanContextFromContext(ctx)
			return nil
		}))
	for _, m := range []*worker.Message{
		message(map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}, nil),
		message(nil, map[string]string{"AWSTraceHeader": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"}),
	} {
		if err := h.Handle(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		if !inner.IsValid() || inner.IsSampled() {
			t.Errorf("handler's span context %v: want a valid, unsampled one", inner)
		}
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans recorded for unsampled traces", n)
	}
}

// TestMiddlewareBaggage: the producer's baggage reaches the handler's context.
func TestMiddlewareBaggage(t *testing.T) {
	t.Parallel()
	tp, _ := newTracing(t)
	var got string
	h := workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(
		worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error {
			got = propagationBaggage(ctx)
			return nil
		}))
	if err := h.Handle(t.Context(), message(map[string]string{"traceparent": producerTraceparent, "baggage": "tenant=acme"}, nil)); err != nil {
		t.Fatal(err)
	}
	if got != "tenant=acme" {
		t.Errorf("baggage %q, want tenant=acme", got)
	}
}

func propagationBaggage(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.Baggage{}.Inject(ctx, c)
	return c["baggage"]
}

// TestMiddlewarePanic: a panicking handler's span ends as failed (panic), and the panic goes on
// to the worker, which recovers it.
func TestMiddlewarePanic(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	h := workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(
		worker.HandlerFunc(func(context.Context, *worker.Message) error { panic("bad input") }))
	func() {
		defer func() {
			if r := recover(); r != "bad input" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = h.Handle(t.Context(), message(nil, nil))
	}()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 ended span", len(spans))
	}
	wantAttrs(t, spans[0], map[attribute.Key]string{"sqsinbox.message.outcome": "failed", "error.type": "panic"})
	if spans[0].Status.Code != codes.Error {
		t.Errorf("status %v, want Error", spans[0].Status.Code)
	}
}

type checkedHandler struct{ checked *worker.Queue }

func (h *checkedHandler) Handle(context.Context, *worker.Message) error { return nil }
func (h *checkedHandler) CheckQueue(_ context.Context, q *worker.Queue) error {
	h.checked = q
	return errors.New("retention too short")
}
func (h *checkedHandler) LogValue() slog.Value { return slog.StringValue("checked") }
func (h *checkedHandler) MaxConcurrency() int  { return 33 }

// TestMiddlewareKeepsQueueChecker: the wrapped handler's start-up check, concurrency limit and
// log value still reach the worker (the inbox handler's retention check must not be lost to tracing).
func TestMiddlewareKeepsQueueChecker(t *testing.T) {
	t.Parallel()
	inner := &checkedHandler{}
	h := workerotel.Middleware("orders", nil)(inner)
	qc, ok := h.(worker.QueueChecker)
	if !ok {
		t.Fatal("the wrapped handler is no worker.QueueChecker")
	}
	q := &worker.Queue{Name: "orders"}
	if err := qc.CheckQueue(t.Context(), q); err == nil || inner.checked != q {
		t.Errorf("CheckQueue = %v, inner saw %v: want the inner check's error and queue", err, inner.checked)
	}
	if lv, ok := h.(slog.LogValuer); !ok || lv.LogValue().String() != "checked" {
		t.Errorf("LogValue is not the inner handler's")
	}
	if cl, ok := h.(worker.ConcurrencyLimiter); !ok || cl.MaxConcurrency() != 33 {
		t.Errorf("MaxConcurrency is not the inner handler's 33")
	}
	plain := workerotel.Middleware("orders", nil)(worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))
	if err := plain.(worker.QueueChecker).CheckQueue(t.Context(), q); err != nil {
		t.Errorf("CheckQueue of a handler without one = %v, want nil", err)
	}
	if n := plain.(worker.ConcurrencyLimiter).MaxConcurrency(); n != 0 {
		t.Errorf("MaxConcurrency of a handler without one = %d, want 0 (the worker's Concurrency stays)", n)
	}
}

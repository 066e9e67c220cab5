package workerotel

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"path"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Attribute keys of this package that the conventions do not name.
const (
	// KeyReceiveCount is the message's ApproximateReceiveCount.
	KeyReceiveCount = attribute.Key("sqsinbox.message.receive_count")
	// KeyOutcome is what became of the message: processed, duplicate, blocked, retry,
	// discarded or failed.
	KeyOutcome = attribute.Key("sqsinbox.message.outcome")
	// KeyRetryAfter is the delay, in seconds, before a retried or blocked message comes back.
	KeyRetryAfter = attribute.Key("sqsinbox.message.retry_after")
	// KeyDiscardReason is the reason a handler gave to [worker.Discard].
	KeyDiscardReason = attribute.Key("sqsinbox.message.discard_reason")
	// KeyGroupID is the MessageGroupId of a message: its FIFO group, or its tenant on a fair queue.
	KeyGroupID = attribute.Key("sqsinbox.message.group_id")
	// KeySNSTopic is the topic of a message that came in an SNS envelope.
	KeySNSTopic = attribute.Key("sqsinbox.sns.topic_arn")
)

// awsTraceHeader is the system attribute in which SQS delivers a message's X-Ray trace header.
var awsTraceHeader = string(types.MessageSystemAttributeNameAWSTraceHeader)

// Middleware returns handler middleware that records a span per message of queue (its name or
// URL), as the package doc describes:
//
//	h = workerotel.Middleware("orders", nil)(h)
//
// The returned handler passes [worker.QueueChecker], [worker.CapacityChecker], [worker.ConcurrencyLimiter] and [log/slog.LogValuer] through to the one
// it wraps, so the inbox handler's start-up checks still run.
func Middleware(queue string, cfg *Config) func(worker.Handler) worker.Handler {
	c := configOrZero(cfg)
	name, attrs := destination(queue)
	p := &processor{
		tracer: c.tracer(),
		prop:   c.propagator(),
		name:   "process " + name,
		attrs: append([]attribute.KeyValue{
			semconv.MessagingSystemAWSSQS,
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
		}, attrs...),
	}
	return func(next worker.Handler) worker.Handler {
		h := &handler{p: p, next: next}
		if bh, ok := next.(worker.BatchHandler); ok {
			return &batchHandler{handler: h, next: bh}
		}
		return h
	}
}

// batchHandler is the middleware around a [worker.BatchHandler]: each message of a batch gets its
// own span, as in Handle, and the batch one more, linked to each message's producer.
type batchHandler struct {
	*handler
	next worker.BatchHandler
}

// HandleBatch runs the wrapped batch handler inside a batch span ("process <queue> batch", with
// messaging.batch.message_count and a link to each message's producer context), with each
// message's work inside its own span: the inbox's claim and commit spans of a message are children
// of that message's span.
func (h *batchHandler) HandleBatch(ctx context.Context, b *worker.Batch) (res []error) {
	spans := make([]trace.Span, b.Len())
	links := make([]trace.Link, 0, b.Len())
	for i := range b.Len() {
		mctx, span := h.p.start(b.Context(i), b.Message(i))
		b.SetContext(i, mctx)
		spans[i] = span
		if sc := h.p.producer(b.Message(i)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	bctx, bspan := h.p.tracer.Start(ctx, h.p.name+" batch", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(h.p.attrs...), trace.WithAttributes(semconv.MessagingBatchMessageCount(b.Len())),
		trace.WithLinks(links...))
	ended := false
	defer func() {
		if !ended { // the batch handler panicked; the worker recovers it
			for _, span := range spans {
				span.SetAttributes(KeyOutcome.String(OutcomeFailed), semconv.ErrorTypeKey.String("panic"))
				span.SetStatus(codes.Error, "handler panicked")
				span.End()
			}
			bspan.SetStatus(codes.Error, "handler panicked")
			bspan.End()
		}
	}()
	res = h.next.HandleBatch(bctx, b)
	ended = true
	for i, span := range spans {
		var err error
		if i < len(res) {
			err = res[i]
		}
		end(b.Context(i), span, err)
	}
	bspan.End()
	return res
}

// producer returns the span context of m's producer: its W3C trace context, else its X-Ray
// header; invalid when it carries neither.
func (p *processor) producer(m *worker.Message) trace.SpanContext {
	if len(m.Attributes) > 0 {
		if sc := trace.SpanContextFromContext(p.prop.Extract(context.Background(), AttributeCarrier(m.Attributes))); sc.IsValid() {
			return sc
		}
	}
	if h, ok := m.SystemAttributes[awsTraceHeader]; ok {
		if xr, ok := parseAWSTraceHeader(h); ok {
			return xr
		}
	}
	return trace.SpanContext{}
}

// destination returns the queue's name, and its attributes: messaging.destination.name, and
// aws.sqs.queue.url when queue is a URL.
func destination(queue string) (string, []attribute.KeyValue) {
	if u, err := url.Parse(queue); err == nil && u.Scheme != "" && u.Host != "" {
		name := path.Base(strings.TrimSuffix(u.Path, "/"))
		return name, []attribute.KeyValue{semconv.MessagingDestinationName(name), semconv.AWSSQSQueueURL(queue)}
	}
	return queue, []attribute.KeyValue{semconv.MessagingDestinationName(queue)}
}

// processor holds what every message's span shares.
type processor struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	name   string
	attrs  []attribute.KeyValue
}

type handler struct {
	p    *processor
	next worker.Handler
}

// Handle runs the wrapped handler inside the message's span.
func (h *handler) Handle(ctx context.Context, m *worker.Message) (err error) {
	ctx, span := h.p.start(ctx, m)
	ended := false
	defer func() {
		if !ended { // the handler panicked; the worker recovers it
			span.SetAttributes(KeyOutcome.String(OutcomeFailed), semconv.ErrorTypeKey.String("panic"))
			span.SetStatus(codes.Error, "handler panicked")
			span.End()
		}
	}()
	err = h.next.Handle(ctx, m)
	ended = true
	end(ctx, span, err)
	return err
}

// CheckQueue runs the wrapped handler's [worker.QueueChecker], if it has one.
func (h *handler) CheckQueue(ctx context.Context, q *worker.Queue) error {
	if qc, ok := h.next.(worker.QueueChecker); ok {
		return qc.CheckQueue(ctx, q)
	}
	return nil
}

// CheckCapacity runs the wrapped handler's [worker.CapacityChecker], if it has one.
func (h *handler) CheckCapacity(concurrency int) error {
	if cc, ok := h.next.(worker.CapacityChecker); ok {
		return cc.CheckCapacity(concurrency)
	}
	return nil
}

// MaxConcurrency is the wrapped handler's [worker.ConcurrencyLimiter] limit, if it has one; 0 (the
// worker's Concurrency stays as set) if not.
func (h *handler) MaxConcurrency() int {
	if cl, ok := h.next.(worker.ConcurrencyLimiter); ok {
		return cl.MaxConcurrency()
	}
	return 0
}

// LogValue is the wrapped handler's, if it has one (an empty group, which slog omits, if not).
func (h *handler) LogValue() slog.Value {
	if lv, ok := h.next.(slog.LogValuer); ok {
		return lv.LogValue()
	}
	return slog.GroupValue()
}

// start begins m's span, as a child of the producer's span when m carries its context.
func (p *processor) start(ctx context.Context, m *worker.Message) (context.Context, trace.Span) {
	before := trace.SpanContextFromContext(ctx)
	pctx := ctx
	if len(m.Attributes) > 0 {
		pctx = p.prop.Extract(ctx, AttributeCarrier(m.Attributes))
	}
	var links []trace.Link
	if h, ok := m.SystemAttributes[awsTraceHeader]; ok {
		if xr, ok := parseAWSTraceHeader(h); ok {
			switch sc := trace.SpanContextFromContext(pctx); {
			case sc.Equal(before): // no W3C context in the attributes
				pctx = trace.ContextWithRemoteSpanContext(pctx, xr)
			case sc.TraceID() != xr.TraceID() || sc.SpanID() != xr.SpanID():
				links = append(links, trace.Link{SpanContext: xr})
			}
		}
	}
	var buf [8]attribute.KeyValue
	attrs := append(buf[:0], semconv.MessagingMessageID(m.ID), KeyReceiveCount.Int(m.ReceiveCount))
	if m.GroupID != "" {
		attrs = append(attrs, KeyGroupID.String(m.GroupID))
	}
	if m.SNS != nil {
		attrs = append(attrs, KeySNSTopic.String(m.SNS.TopicARN))
	}
	return p.tracer.Start(pctx, p.name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(p.attrs...), trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// end records what the handler's err means for the message, and ends the span.
func end(ctx context.Context, span trace.Span, err error) {
	out, errType := outcome(ctx, err)
	span.SetAttributes(KeyOutcome.String(out))
	switch {
	case errType != "":
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case out == OutcomeBlocked:
		be, _ := errors.AsType[*worker.BlockedError](err)
		span.SetAttributes(KeyRetryAfter.Float64(be.After.Seconds()))
	case out == OutcomeRetry:
		re, _ := errors.AsType[*worker.RetryError](err)
		span.SetAttributes(KeyRetryAfter.Float64(re.After.Seconds()))
	case out == OutcomeDiscarded:
		de, _ := errors.AsType[*worker.DiscardError](err)
		span.SetAttributes(KeyDiscardReason.String(de.Reason))
	}
	span.End()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// tracerProvider is what send needs of a tracer provider: *sdktrace.TracerProvider.
type tracerProvider interface {
	trace.TracerProvider
	ForceFlush(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// maxAttributes is the number of message attributes SQS and SNS allow a message.
const maxAttributes = 10

// flushTimeout bounds the export of the spans at exit.
const flushTimeout = 5 * time.Second

// traceEnvHelp is what send's --help says about tracing.
const traceEnvHelp = "With OTEL_TRACES_EXPORTER=otlp, or OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) set,\n" +
	"send records a producer span per message (OTLP over HTTP, configured by the standard OTEL_*\n" +
	"variables; TRACEPARENT and TRACESTATE, if set, are its parent) and writes its context into\n" +
	"the message's traceparent and tracestate attributes, for the worker's span to continue. A\n" +
	"message whose own attributes leave no room under the 10 that SQS allows, or that the headers\n" +
	"would take over --max-bytes, is sent without them, and send says so once."

// tracingFromEnv says whether the standard OpenTelemetry variables, read with getenv, ask for
// traces: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint with OTEL_TRACES_EXPORTER unset. A
// request send cannot honour (another exporter or protocol) is off, with a note saying why.
func tracingFromEnv(getenv func(string) string) (on bool, note string) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, ""
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, ""
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, ""
		}
	case "otlp":
	default:
		return false, fmt.Sprintf("OTEL_TRACES_EXPORTER=%s is not supported (otlp or none)", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Sprintf("%s=%s is not supported (http/protobuf)", v, p)
			}
			break
		}
	}
	return true, ""
}

// newOTLPProvider is the tracer provider the environment asks for: OTLP over HTTP, batched,
// with the service name sqsinbox unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. The exporter, the sampler and the batcher read their OTEL_* variables themselves.
func newOTLPProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("sqsinbox")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// sendTracing records send's producer spans and writes their context into the messages. A nil
// *sendTracing is tracing off: its methods pass the messages through and cost nothing.
type sendTracing struct {
	tp     tracerProvider
	own    bool // tp was made here: shut it down at exit
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	parent context.Context // holds TRACEPARENT's span context, if any
	name   string          // the span name: "send orders", "publish orders"
	attrs  []attribute.KeyValue
	stderr io.Writer
	warned bool // send has said that a message went without trace headers

	mu        sync.Mutex
	exportErr error // the first error the exporter reported on its own (otel.Handle)
}

// startTracing returns send's tracing: with e.tracer when set (tests), else as the
// environment asks (nil when it does not). topicARN is set for a publish, queueURL for a send.
func startTracing(ctx context.Context, e env, topicARN, queueURL string) (*sendTracing, error) {
	getenv := e.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	t := &sendTracing{tp: e.tracer, stderr: e.stderr, prop: propagation.TraceContext{}}
	if t.tp == nil {
		on, note := tracingFromEnv(getenv)
		if note != "" {
			fmt.Fprintf(e.stderr, "sqsinbox send: tracing off: %s\n", note)
		}
		if !on {
			return nil, nil
		}
		tp, err := newOTLPProvider(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing (OTEL_* variables): %w", err)
		}
		t.tp, t.own = tp, true
		otel.SetErrorHandler(otel.ErrorHandlerFunc(t.handle))
	}
	t.tracer = t.tp.Tracer("github.com/sqsinbox/sqsinbox/cmd/sqsinbox", trace.WithSchemaURL(semconv.SchemaURL))
	// TRACEPARENT and TRACESTATE carry a caller's context into a process (a CI job, a script).
	t.parent = t.prop.Extract(ctx, propagation.MapCarrier{
		"traceparent": getenv("TRACEPARENT"), "tracestate": getenv("TRACESTATE")})
	if topicARN != "" {
		name := topicName(topicARN)
		t.name = "publish " + name
		t.attrs = []attribute.KeyValue{semconv.MessagingSystemAWSSNS, semconv.MessagingOperationName("publish"),
			semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(name), semconv.AWSSNSTopicARN(topicARN)}
	} else {
		name := lastPart(queueURL)
		t.name = "send " + name
		t.attrs = []attribute.KeyValue{semconv.MessagingSystemAWSSQS, semconv.MessagingOperationName("send"),
			semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(name), semconv.AWSSQSQueueURL(queueURL)}
	}
	return t, nil
}

func (t *sendTracing) handle(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exportErr == nil {
		t.exportErr = err
	}
}

// outgoing is a message about to be sent: its entry, its size as SQS counts it, the line it
// came from, and its span (nil without tracing).
type outgoing struct {
	entry types.SendMessageBatchRequestEntry
	size  int
	line  int
	span  trace.Span
}

// start begins the producer span of a message and writes its context into a copy of the
// message's attributes, when there is room (see traceHeaders); without tracing it returns the
// message as it is.
func (t *sendTracing) start(entry types.SendMessageBatchRequestEntry, size, line, maxBytes int) outgoing {
	out := outgoing{entry: entry, size: size, line: line}
	if t == nil {
		return out
	}
	ctx, span := t.tracer.Start(t.parent, t.name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(t.attrs...))
	out.span = span
	h := propagation.MapCarrier{}
	t.prop.Inject(ctx, h)
	attrs, extra, left, why := traceHeaders(entry.MessageAttributes, h, maxBytes-size)
	if len(left) > 0 && !t.warned {
		t.warned = true
		what := "its trace headers"
		if len(attrs) > len(entry.MessageAttributes) {
			what = strings.Join(left, " and ")
		}
		fmt.Fprintf(t.stderr, "sqsinbox send: line %d's message goes without %s (%s), and so will any other like it\n", line, what, why)
	}
	out.entry.MessageAttributes, out.size = attrs, size+extra
	return out
}

// traceHeaders returns a copy of attrs with the trace headers added as String attributes, and
// the bytes they add, as far as they fit: no header overwrites an attribute of the message, and
// the attributes stay within the 10 SQS allows and the headers within room bytes. traceparent
// comes first: without it, none is added. left names the headers left off, and why says why.
func traceHeaders(attrs map[string]types.MessageAttributeValue, headers map[string]string, room int) (
	out map[string]types.MessageAttributeValue, extra int, left []string, why string) {
	keys := slices.Sorted(maps.Keys(headers))
	if i := slices.Index(keys, "traceparent"); i > 0 {
		keys = append([]string{"traceparent"}, slices.Delete(keys, i, i+1)...)
	}
	out = make(map[string]types.MessageAttributeValue, len(attrs)+len(headers))
	maps.Copy(out, attrs)
	for i, k := range keys {
		n := len(k) + len("String") + len(headers[k])
		switch _, set := attrs[k]; {
		case set:
			why = fmt.Sprintf("it has an attribute %q of its own", k)
		case len(out) >= maxAttributes:
			why = fmt.Sprintf("its %d attributes leave no room under the %d SQS allows", len(attrs), maxAttributes)
		case extra+n > room:
			why = fmt.Sprintf("%s would take it over --max-bytes", k)
		default:
			workerotel.AttributeCarrier(out).Set(k, headers[k])
			extra += n
			continue
		}
		if i == 0 && k == "traceparent" {
			return attrs, 0, keys, why
		}
		left = append(left, k)
	}
	return out, extra, left, why
}

// end ends the spans of messages that a call sent, or failed to send with err.
func (t *sendTracing) end(msgs []outgoing, err error) {
	if t == nil {
		return
	}
	for _, m := range msgs {
		if err != nil {
			m.span.RecordError(err)
			m.span.SetStatus(codes.Error, err.Error())
			m.span.SetAttributes(semconv.ErrorTypeOther)
		}
		m.span.End()
	}
}

// flush exports the spans at exit, within flushTimeout, and says on stderr if it could not:
// the messages have been sent, so it is no error of send's.
func (t *sendTracing) flush(ctx context.Context) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	err := t.tp.ForceFlush(ctx)
	if t.own {
		err = errors.Join(err, t.tp.Shutdown(ctx))
	}
	t.mu.Lock()
	err = errors.Join(t.exportErr, err)
	t.mu.Unlock()
	if err != nil {
		fmt.Fprintf(t.stderr, "sqsinbox send: tracing: spans not exported: %s\n", oneLine(err))
	}
}

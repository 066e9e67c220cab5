package workerotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// traced is a worker with the inbox handler, traced by the middleware and the inbox hooks, on a
// queue of its own.
type traced struct {
	exp    *tracetest.InMemoryExporter
	tracer trace.Tracer // the producer's and the business code's
	q      *sqstest.Queue
	w      *worker.Worker
	schema string
}

func startTraced(t *testing.T, prefix string) *traced {
	t.Helper()
	tp, exp := newTracing(t)
	cfg := &workerotel.Config{TracerProvider: tp}
	ib, _, schema := newInbox(t, inbox.Config{Hooks: workerotel.InboxHooks(cfg)})
	tracer := tp.Tracer("warehouse")
	pick := func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		ctx, span := tracer.Start(ctx, "insert pick task")
		defer span.End()
		key, _, _ := inbox.EventKey(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects (event_id) VALUES ($1)`, key)
		return err
	}
	h, err := inboxhandler.New(ib, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 5})
	// One message at a time, so that the second delivery of an event meets the first's
	// committed row (two at once would meet its uncommitted claim and wait: a duplicate too).
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second,
		Handler: workerotel.Middleware(q.URL, cfg)(h)})
	return &traced{exp: exp, tracer: tracer, q: q, w: w, schema: schema}
}

// waitProcessed waits until n messages' spans have ended, and stops the worker.
func (tr *traced) waitProcessed(t *testing.T, n int) tracetest.SpanStubs {
	t.Helper()
	sqstest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d process spans", n), func() (bool, string) {
		got := len(byName(tr.exp.GetSpans(), "process "+tr.q.Name))
		return got >= n, fmt.Sprintf("%d process spans", got)
	})
	workertest.Stop(t, tr.w)
	return tr.exp.GetSpans()
}

// produce starts the producer's span and returns it with the message attributes that carry its
// context.
func (tr *traced) produce(t *testing.T) (trace.Span, map[string]string) {
	ctx, span := tr.tracer.Start(t.Context(), "send "+tr.q.Name, trace.WithSpanKind(trace.SpanKindProducer))
	attrs := map[string]types.MessageAttributeValue{}
	propagation.TraceContext{}.Inject(ctx, workerotel.AttributeCarrier(attrs))
	out := map[string]string{}
	for k, v := range attrs {
		out[k] = *v.StringValue
	}
	return span, out
}

// TestTraceEndToEnd (the pass's SQS server, PostgreSQL): an event sent twice with the producer's
// traceparent. Both deliveries' spans are children of the producer's span; the first has the
// inbox claim (fresh), the handler's own span and the commit as children, the second a claim
// that says duplicate, for the same handler and key. The tree is printed for the README.
func TestTraceEndToEnd(t *testing.T) {
	t.Parallel()
	tr := startTraced(t, "orders")
	send, carried := tr.produce(t)
	msg := sqstest.Message{Body: `{"id":"evt_9f3k","order_id":"o-1"}`, Attributes: carried}
	if err := sqstest.Send(t.Context(), srv.Client(), tr.q.URL, []sqstest.Message{msg, msg}); err != nil {
		t.Fatal(err)
	}
	send.End()
	spans := tr.waitProcessed(t, 2)

	root := byName(spans, "send "+tr.q.Name)[0]
	procs := children(spans, root.SpanContext)
	if len(procs) != 2 {
		t.Fatalf("the producer's span has %d children, want the 2 deliveries' spans:\n%s", len(procs), spanTree(spans, root))
	}
	t.Logf("span tree (from the in-memory exporter):\n%s", spanTree(spans, root))
	for i, want := range []struct {
		outcome string
		kids    []string
	}{
		{"processed", []string{"inbox claim", "insert pick task", "inbox commit"}},
		{"duplicate", []string{"inbox claim"}},
	} {
		p := procs[i]
		if p.Name != "process "+tr.q.Name || p.SpanKind != trace.SpanKindConsumer || !p.Parent.IsRemote() {
			t.Errorf("delivery %d: span %q kind %v remote parent %v, want a consumer span with the producer's remote parent",
				i+1, p.Name, p.SpanKind, p.Parent.IsRemote())
		}
		wantAttrs(t, p, map[attribute.Key]string{
			"messaging.system": "aws_sqs", "messaging.operation.name": "process", "messaging.destination.name": tr.q.Name,
			"aws.sqs.queue.url": tr.q.URL, "sqsinbox.message.outcome": want.outcome, "sqsinbox.inbox.handler": "warehouse",
			"sqsinbox.inbox.event_key": "evt_9f3k", "sqsinbox.inbox.claim": map[string]string{"processed": "fresh", "duplicate": "duplicate"}[want.outcome],
		})
		if id := attrs(p)["messaging.message.id"].AsString(); id == "" || (i == 1 && id == attrs(procs[0])["messaging.message.id"].AsString()) {
			t.Errorf("delivery %d: messaging.message.id %q, want each message's own", i+1, id)
		}
		if rc := attrs(p)["sqsinbox.message.receive_count"].AsInt64(); rc < 1 {
			t.Errorf("delivery %d: receive count %d", i+1, rc)
		}
		var names []string
		for _, k := range children(spans, p.SpanContext) {
			names = append(names, k.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(want.kids) {
			t.Errorf("delivery %d (%s): children %q, want %q", i+1, want.outcome, names, want.kids)
		}
	}
	claims := byName(spans, "inbox claim")
	if len(claims) != 2 {
		t.Fatalf("%d claim spans, want 2", len(claims))
	}
	for _, c := range claims {
		wantAttrs(t, c, map[attribute.Key]string{"sqsinbox.inbox.handler": "warehouse", "sqsinbox.inbox.event_key": "evt_9f3k"})
	}
	// The inbox handler takes batches: each batch has a span of its own, linked to the producer
	// of each of its messages.
	links := 0
	for _, bs := range byName(spans, "process "+tr.q.Name+" batch") {
		n := attrs(bs)["messaging.batch.message_count"].AsInt64()
		if int(n) != len(bs.Links) {
			t.Errorf("batch span: message_count %d, %d links", n, len(bs.Links))
		}
		for _, l := range bs.Links {
			if l.SpanContext.SpanID() != root.SpanContext.SpanID() {
				t.Errorf("batch span links %v, want the producer's span", l.SpanContext.SpanID())
			}
		}
		links += len(bs.Links)
	}
	if links != 2 {
		t.Errorf("batch spans link %d producers, want 2 (one per message)", links)
	}
	if c := byName(spans, "inbox commit"); len(c) != 1 {
		t.Errorf("%d commit spans, want 1", len(c))
	} else {
		wantAttrs(t, c[0], map[attribute.Key]string{"sqsinbox.inbox.outcome": "committed"})
	}
}

// TestTraceThroughSNSEnvelope (the pass's SQS server, PostgreSQL): a message that came through SNS
// without raw delivery carries the publisher's traceparent inside the envelope's
// MessageAttributes; the worker unwraps it, and the span continues the publisher's trace.
func TestTraceThroughSNSEnvelope(t *testing.T) {
	t.Parallel()
	tr := startTraced(t, "orders-sns")
	publish, attrs := tr.produce(t)
	topic := "arn:aws:sns:us-east-1:000000000000:orders"
	env := map[string]any{
		"Type": "Notification", "MessageId": "6f5a1f8e-sns", "TopicArn": topic,
		"Message": `{"id":"evt_sns1"}`, "Timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"MessageAttributes": map[string]any{"traceparent": map[string]string{"Type": "String", "Value": attrs["traceparent"]}},
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqstest.Send(t.Context(), srv.Client(), tr.q.URL, []sqstest.Message{{Body: string(body)}}); err != nil {
		t.Fatal(err)
	}
	publish.End()
	spans := tr.waitProcessed(t, 1)
	p := byName(spans, "process "+tr.q.Name)[0]
	if p.Parent.SpanID() != publish.SpanContext().SpanID() || p.SpanContext.TraceID() != publish.SpanContext().TraceID() {
		t.Errorf("parent %v, want the publisher's span %v", p.Parent, publish.SpanContext())
	}
	wantAttrs(t, p, map[attribute.Key]string{"sqsinbox.sns.topic_arn": topic, "sqsinbox.message.outcome": "processed",
		"sqsinbox.inbox.event_key": "evt_sns1"})
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
	"github.com/sqsinbox/sqsinbox/worker/workerotel/workeroteltest"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// The trace tests give send a tracer provider of the SDK whose in-memory exporter they read
// back. It batches with an hour's timeout, so send's spans are there when send returns only if
// send flushed them at exit.

// sendTracer returns such a provider and its exporter.
func sendTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(t.Context())) })
	return tp, exp
}

// cliWith runs the CLI with tracing from tp (nil: none given) and the variables vars in place of
// the process's environment.
func cliWith(t *testing.T, tp tracerProvider, vars map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, tracer: tp,
		getenv: func(k string) string { return vars[k] }}
	code := runEnv(t.Context(), e, args)
	return result{code, out.String(), errb.String()}
}

// spanAttrs returns a span's attributes as strings, by key.
func spanAttrs(s tracetest.SpanStub) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// wantSpanAttrs fails unless span s has each of want.
func wantSpanAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := spanAttrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %q: %s = %q, want %q", s.Name, k, got[k], v)
		}
	}
}

// traceparent is the header that carries s's context, sampled.
func traceparent(s trace.SpanContext) string {
	return "00-" + s.TraceID().String() + "-" + s.SpanID().String() + "-01"
}

// TestSendTraceEndToEnd (GoAws, PostgreSQL): a CI job's span hands its context to send in
// TRACEPARENT and TRACESTATE; send sends one event twice, each message under a producer span of
// its own whose context is in its traceparent and tracestate attributes; a worker with
// workerotel.Middleware and an inbox with workerotel.InboxHooks processes the first and finds
// the second a duplicate. Each consumer span has its message's producer span as its remote
// parent, in the same trace, with the caller's tracestate. The tree is printed for the README.
func TestSendTraceEndToEnd(t *testing.T) {
	t.Parallel()
	sendTP, exp := sendTracer(t)
	workerTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = workerTP.Shutdown(context.WithoutCancel(t.Context())) })
	_, job := workerTP.Tracer("ci").Start(t.Context(), "replay orders")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace", MaxReceiveCount: 5})

	vars := map[string]string{"TRACEPARENT": traceparent(job.SpanContext()), "TRACESTATE": "ci=replay-7"}
	r := cliWith(t, sendTP, vars, `{"id":"evt_9f3k","order_id":"o-1"}`, "send", "--queue", q.URL, "--repeat", "2").mustOK(t)
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing", r.stderr)
	}
	sends := workeroteltest.ByName(exp.GetSpans(), "send "+q.Name)
	if len(sends) != 2 {
		t.Fatalf("%d send spans exported when send returned, want 2 (flushed at exit)", len(sends))
	}
	for _, s := range sends {
		if s.SpanKind != trace.SpanKindProducer || s.Parent.SpanID() != job.SpanContext().SpanID() ||
			s.SpanContext.TraceID() != job.SpanContext().TraceID() || s.Status.Code != 0 {
			t.Errorf("send span: kind %v, parent %v, trace %v, status %v; want a producer span under the job's, OK",
				s.SpanKind, s.Parent.SpanID(), s.SpanContext.TraceID(), s.Status)
		}
		wantSpanAttrs(t, s, map[attribute.Key]string{"messaging.system": "aws_sqs", "messaging.operation.name": "send",
			"messaging.operation.type": "send", "messaging.destination.name": q.Name, "aws.sqs.queue.url": q.URL})
	}

	cfg := &workerotel.Config{TracerProvider: workerTP}
	ib, schema := cliInbox(t, inbox.Config{Hooks: workerotel.InboxHooks(cfg)})
	h, err := inboxhandler.New(ib, "warehouse", nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		key, _, _ := inbox.EventKey(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects (event_id) VALUES ($1)`, key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// One message at a time, so that the second meets the first's committed row.
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second,
		Handler: workerotel.Middleware(q.URL, cfg)(h)})
	sqstest.WaitFor(t, 60*time.Second, "2 process spans", func() (bool, string) {
		n := len(workeroteltest.ByName(exp.GetSpans(), "process "+q.Name))
		return n >= 2, fmt.Sprintf("%d process spans", n)
	})
	workertest.Stop(t, w)
	job.End()

	spans := exp.GetSpans()
	root := workeroteltest.ByName(spans, "replay orders")[0]
	tree := workeroteltest.SpanTree(spans, root)
	t.Logf("span tree (from the in-memory exporter):\n%s", tree)
	outcomes := map[string]bool{}
	for _, s := range sends {
		procs := workeroteltest.Children(spans, s.SpanContext)
		if len(procs) != 1 {
			t.Fatalf("send span %v has %d children, want its message's process span:\n%s", s.SpanContext.SpanID(), len(procs), tree)
		}
		p := procs[0]
		if p.Name != "process "+q.Name || p.SpanKind != trace.SpanKindConsumer || !p.Parent.IsRemote() ||
			p.Parent.SpanID() != s.SpanContext.SpanID() || p.SpanContext.TraceID() != s.SpanContext.TraceID() {
			t.Errorf("process span %q kind %v, parent %v (remote %v), trace %v; want a consumer span whose remote parent is send's %v in trace %v",
				p.Name, p.SpanKind, p.Parent.SpanID(), p.Parent.IsRemote(), p.SpanContext.TraceID(), s.SpanContext.SpanID(), s.SpanContext.TraceID())
		}
		if ts := p.SpanContext.TraceState().String(); ts != "ci=replay-7" {
			t.Errorf("process span's tracestate %q, want the caller's ci=replay-7", ts)
		}
		out := spanAttrs(p)["sqsinbox.message.outcome"]
		outcomes[out] = true
		var kids []string
		for _, k := range workeroteltest.Children(spans, p.SpanContext) {
			kids = append(kids, k.Name+"="+spanAttrs(k)["sqsinbox.inbox.outcome"])
		}
		want := map[string][]string{"processed": {"inbox claim=fresh", "inbox commit=committed"}, "duplicate": {"inbox claim=duplicate"}}[out]
		if !slices.Equal(kids, want) {
			t.Errorf("%s message: children %q, want %q", out, kids, want)
		}
		wantSpanAttrs(t, p, map[attribute.Key]string{"sqsinbox.inbox.handler": "warehouse", "sqsinbox.inbox.event_key": "evt_9f3k"})
	}
	if !outcomes["processed"] || !outcomes["duplicate"] {
		t.Errorf("outcomes %v, want one processed and one duplicate", slices.Collect(maps.Keys(outcomes)))
	}
}

// cliInbox returns an inbox with cfg on a fresh schema, which has an effects table for the
// handler's write.
func cliInbox(t *testing.T, cfg inbox.Config) (*inbox.Inbox, string) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg.Schema = "cli_" + randSuffix()
	if _, err := inbox.Migrate(t.Context(), pool, cfg.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+cfg.Schema+`.effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib, cfg.Schema
}

// TestSendTraceToTopic (fauxqs): send --topic-arn records a publish span per message and puts
// its context in the message's attributes, which reach a raw subscription as SQS attributes and
// an enveloped one inside the envelope, where the worker's span reads them.
func TestSendTraceToTopic(t *testing.T) {
	srv.SkipWithoutSNS(t)
	t.Parallel()
	tp, exp := sendTracer(t)
	topic := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "cli-trace"})
	raw := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-raw"})
	srv.Subscribe(t, topic, raw, sqstest.SubscribeOptions{Raw: true})
	enveloped := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-env"})
	srv.Subscribe(t, topic, enveloped, sqstest.SubscribeOptions{})

	cliWith(t, tp, nil, `{"id":"evt_sns1"}`, "send", "--topic-arn", topic.ARN).mustOK(t)
	pubs := workeroteltest.ByName(exp.GetSpans(), "publish "+topic.Name)
	if len(pubs) != 1 {
		t.Fatalf("%d publish spans, want 1", len(pubs))
	}
	pub := pubs[0]
	wantSpanAttrs(t, pub, map[attribute.Key]string{"messaging.system": "aws.sns", "messaging.operation.name": "publish",
		"messaging.operation.type": "send", "messaging.destination.name": topic.Name, "aws.sns.topic.arn": topic.ARN})
	if pub.SpanKind != trace.SpanKindProducer || pub.Parent.IsValid() {
		t.Errorf("publish span: kind %v, parent %v; want a producer span with no parent", pub.SpanKind, pub.Parent)
	}
	m := receiveAll(t, raw.URL, 1)[0]
	if got := aws.ToString(m.MessageAttributes["traceparent"].StringValue); got != traceparent(pub.SpanContext) {
		t.Errorf("raw subscription: traceparent %q, want the publish span's %q", got, traceparent(pub.SpanContext))
	}
	if got := aws.ToString(m.MessageAttributes["event_id"].StringValue); got != "evt_sns1" {
		t.Errorf("raw subscription: event_id %q", got)
	}

	wtp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = wtp.Shutdown(context.WithoutCancel(t.Context())) })
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: enveloped.URL, WaitTime: time.Second,
		Handler: workerotel.Middleware(enveloped.URL, &workerotel.Config{TracerProvider: wtp})(
			worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }))})
	sqstest.WaitFor(t, 60*time.Second, "the process span", func() (bool, string) {
		n := len(workeroteltest.ByName(exp.GetSpans(), "process "+enveloped.Name))
		return n >= 1, fmt.Sprintf("%d process spans", n)
	})
	workertest.Stop(t, w)
	spans := exp.GetSpans()
	t.Logf("span tree:\n%s", workeroteltest.SpanTree(spans, pub))
	p := workeroteltest.ByName(spans, "process "+enveloped.Name)[0]
	if p.Parent.SpanID() != pub.SpanContext.SpanID() || p.SpanContext.TraceID() != pub.SpanContext.TraceID() {
		t.Errorf("enveloped: process span's parent %v in trace %v, want the publish span %v in %v",
			p.Parent.SpanID(), p.SpanContext.TraceID(), pub.SpanContext.SpanID(), pub.SpanContext.TraceID())
	}
	wantSpanAttrs(t, p, map[attribute.Key]string{"sqsinbox.sns.topic_arn": topic.ARN})
}

// TestSendTraceHeadersNeverCostTheMessage (GoAws): a line that fits --max-bytes but would not
// with traceparent is sent without it, and send says so once; a shorter line still gets it.
// Every message keeps its event_id, and every one has its span.
func TestSendTraceHeadersNeverCostTheMessage(t *testing.T) {
	t.Parallel()
	tp, exp := sendTracer(t)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-tight"})
	long := func(id string) string { return `{"id":"` + id + `","pad":"` + strings.Repeat("x", 200) + `"}` }
	limit := len(long("evt_a")) + len("event_id") + len("String") + len("evt_a") + 40 // traceparent takes 72
	in := long("evt_a") + "\n" + long("evt_b") + "\n" + `{"id":"evt_c"}` + "\n"
	r := cliWith(t, tp, nil, in, "send", "--queue", q.URL, "--max-bytes", fmt.Sprint(limit)).mustOK(t)
	if n := strings.Count(r.stderr, "goes without its trace headers"); n != 1 || !strings.Contains(r.stderr, "line 1's message") ||
		!strings.Contains(r.stderr, "traceparent would take it over --max-bytes") {
		t.Errorf("stderr %q: want one line saying line 1's message goes without its trace headers, and why", r.stderr)
	}
	spans := map[string]trace.SpanContext{} // by the traceparent that carries it
	for _, s := range workeroteltest.ByName(exp.GetSpans(), "send "+q.Name) {
		spans[traceparent(s.SpanContext)] = s.SpanContext
	}
	if len(spans) != 3 {
		t.Errorf("%d send spans, want 3", len(spans))
	}
	for _, m := range receiveAll(t, q.URL, 3) {
		key := aws.ToString(m.MessageAttributes["event_id"].StringValue)
		tpHeader, traced := m.MessageAttributes["traceparent"]
		switch {
		case key == "evt_c" && (!traced || !spans[aws.ToString(tpHeader.StringValue)].IsValid()):
			t.Errorf("evt_c: traceparent %v, want one of send's spans", tpHeader.StringValue)
		case key != "evt_c" && traced:
			t.Errorf("%s: traceparent %q, want none (no room)", key, aws.ToString(tpHeader.StringValue))
		case key == "":
			t.Errorf("a message lost its event_id: %v", m.MessageAttributes)
		}
	}
}

// TestSendTracingOff (GoAws): without a tracer and with no OTEL_* variable asking, send writes
// no trace headers; with one it cannot honour, it says so and sends without them.
func TestSendTracingOff(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-off"})
	r := cliWith(t, nil, nil, `{"id":"evt_1"}`, "send", "--queue", q.URL).mustOK(t)
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing", r.stderr)
	}
	r = cliWith(t, nil, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `{"id":"evt_2"}`, "send", "--queue", q.URL).mustOK(t)
	if want := "sqsinbox send: tracing off: OTEL_TRACES_EXPORTER=zipkin is not supported (otlp or none)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	for _, m := range receiveAll(t, q.URL, 2) {
		if len(m.MessageAttributes) != 1 {
			t.Errorf("message %s: attributes %v, want the event_id alone", aws.ToString(m.Body), slices.Collect(maps.Keys(m.MessageAttributes)))
		}
	}
}

// TestSendTracingFromTheEnvironment (GoAws; not parallel: it sets the process's OTEL_*
// variables, which the OTLP exporter reads): with OTEL_EXPORTER_OTLP_ENDPOINT set, send makes
// its own OTLP exporter and writes traceparent; a collector that cannot be reached costs the
// send nothing but one line on stderr at exit.
func TestSendTracingFromTheEnvironment(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+closed)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-env"})
	r := cli(t, `{"id":"evt_1"}`, "send", "--queue", q.URL).mustOK(t)
	if !strings.Contains(r.stdout, "sent 1 message") {
		t.Errorf("stdout %q", r.stdout)
	}
	if n := strings.Count(r.stderr, "sqsinbox send: tracing: spans not exported:"); n != 1 {
		t.Errorf("stderr %q: want one line saying the spans were not exported", r.stderr)
	}
	m := receiveAll(t, q.URL, 1)[0]
	var tp string
	if a, ok := m.MessageAttributes["traceparent"]; ok {
		tp = aws.ToString(a.StringValue)
	}
	ctx := propagation.TraceContext{}.Extract(t.Context(), propagation.MapCarrier{"traceparent": tp})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Errorf("traceparent %q, want a valid one", tp)
	}
}

func TestTracingFromEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		vars map[string]string
		on   bool
		note string
	}{
		{nil, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, false, "OTEL_TRACES_EXPORTER=console is not supported (otlp or none)"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false,
			"OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported (http/protobuf)"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
	}
	for _, tc := range cases {
		on, note := tracingFromEnv(func(k string) string { return tc.vars[k] })
		if on != tc.on || note != tc.note {
			t.Errorf("%v: on %v, note %q; want %v, %q", tc.vars, on, note, tc.on, tc.note)
		}
	}
}

func TestTraceHeaders(t *testing.T) {
	t.Parallel()
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrsN := func(n int) map[string]types.MessageAttributeValue {
		m := map[string]types.MessageAttributeValue{}
		for i := range n {
			m[fmt.Sprintf("a%d", i)] = str("v")
		}
		return m
	}
	tpv := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	headers := map[string]string{"traceparent": tpv, "tracestate": "ci=7"}
	tpBytes, tsBytes := len("traceparent")+len("String")+len(tpv), len("tracestate")+len("String")+len("ci=7")
	own := attrsN(1)
	own["traceparent"] = str("mine")
	cases := []struct {
		name  string
		attrs map[string]types.MessageAttributeValue
		room  int
		added []string
		why   string
	}{
		{"room for both", attrsN(1), 1000, []string{"traceparent", "tracestate"}, ""},
		{"room for one attribute", attrsN(9), 1000, []string{"traceparent"}, "its 9 attributes leave no room under the 10 SQS allows"},
		{"no room", attrsN(10), 1000, nil, "its 10 attributes leave no room under the 10 SQS allows"},
		{"its own traceparent", own, 1000, nil, `it has an attribute "traceparent" of its own`},
		{"bytes for traceparent only", attrsN(1), tpBytes + tsBytes - 1, []string{"traceparent"}, "tracestate would take it over --max-bytes"},
		{"no bytes", attrsN(1), tpBytes - 1, nil, "traceparent would take it over --max-bytes"},
	}
	for _, tc := range cases {
		before := maps.Clone(tc.attrs)
		out, extra, left, why := traceHeaders(tc.attrs, headers, tc.room)
		same := func(a, b types.MessageAttributeValue) bool {
			return aws.ToString(a.StringValue) == aws.ToString(b.StringValue)
		}
		if !maps.EqualFunc(tc.attrs, before, same) {
			t.Errorf("%s: the message's own attributes changed", tc.name)
		}
		var added []string
		wantExtra := 0
		for k, v := range out {
			if _, was := tc.attrs[k]; was {
				if aws.ToString(v.StringValue) != aws.ToString(tc.attrs[k].StringValue) {
					t.Errorf("%s: attribute %s overwritten", tc.name, k)
				}
				continue
			}
			added = append(added, k)
			wantExtra += len(k) + len("String") + len(aws.ToString(v.StringValue))
			if aws.ToString(v.StringValue) != headers[k] || aws.ToString(v.DataType) != "String" {
				t.Errorf("%s: %s = %v", tc.name, k, v)
			}
		}
		slices.Sort(added)
		wantLeft := slices.DeleteFunc(slices.Sorted(maps.Keys(headers)), func(k string) bool { return slices.Contains(tc.added, k) })
		if !slices.Equal(added, tc.added) || why != tc.why || extra != wantExtra || !slices.Equal(left, wantLeft) || len(out) > 10 {
			t.Errorf("%s: added %v (%d bytes), left %v, why %q; want %v (%d bytes), left %v, %q",
				tc.name, added, extra, left, why, tc.added, wantExtra, wantLeft, tc.why)
		}
	}
}

// TestSendSpansOfAFailedSend (GoAws): a batch that fails ends its messages' spans with status
// Error, and send, failing, still exports them. The lines past it were never sent, so they
// have no span.
func TestSendSpansOfAFailedSend(t *testing.T) {
	t.Parallel()
	tp, exp := sendTracer(t)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-trace-fail"})
	missing := strings.Replace(q.URL, q.Name, q.Name+"-missing", 1)
	var in strings.Builder
	for i := range 12 {
		fmt.Fprintf(&in, `{"id":"evt_%d"}`+"\n", i)
	}
	r := cliWith(t, tp, nil, in.String(), "send", "--queue", missing)
	if r.code != 1 || !strings.Contains(r.stdout, "sent 0 of 12 messages before the error") {
		t.Fatalf("send to a missing queue: exit %d, stdout %q, stderr %q; want exit 1, 0 of 12 sent", r.code, r.stdout, r.stderr)
	}
	spans := workeroteltest.ByName(exp.GetSpans(), "send "+q.Name+"-missing")
	if len(spans) != 10 {
		t.Fatalf("%d send spans, want the first batch's 10", len(spans))
	}
	for _, s := range spans {
		if s.Status.Code != codes.Error || spanAttrs(s)["error.type"] != "_OTHER" || len(s.Events) == 0 {
			t.Errorf("span of a failed send: status %v, error.type %q, %d events; want Error, _OTHER and the error recorded",
				s.Status, spanAttrs(s)["error.type"], len(s.Events))
		}
	}
}

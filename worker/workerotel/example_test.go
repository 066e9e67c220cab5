package workerotel_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// A worker with traces, metrics and trace ids in its logs, through the global OpenTelemetry
// providers that the program set up (an OTLP exporter, say).
func Example() {
	ctx := context.Background()
	slog.SetDefault(slog.New(workerotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil))))
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(pool, &inbox.Config{Hooks: workerotel.InboxHooks(nil)}) // claim and commit spans
	if err != nil {
		log.Fatal(err)
	}
	h, err := inboxhandler.New(ib, "warehouse", nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		slog.InfoContext(ctx, "picking", "message_id", m.ID) // carries trace_id and span_id
		_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1::jsonb->>'order_id')`, string(m.Body))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := workerotel.NewMetrics(nil, "orders")
	if err != nil {
		log.Fatal(err)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{
		QueueName: "orders",
		Handler:   workerotel.Middleware("orders", nil)(h), // a span per message
		Metrics:   metrics,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
}

// The producer writes its span's context into the message attributes; the worker's span for
// the message continues that trace.
func ExampleMiddleware() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTextMapPropagator(propagation.TraceContext{})

	// The producer, before SendMessage.
	ctx, send := tp.Tracer("producer").Start(context.Background(), "send orders", trace.WithSpanKind(trace.SpanKindProducer))
	attrs := map[string]types.MessageAttributeValue{"event_id": {DataType: aws.String("String"), StringValue: aws.String("evt_9f3k")}}
	otel.GetTextMapPropagator().Inject(ctx, workerotel.AttributeCarrier(attrs))
	send.End()

	// The worker, as it runs the handler on the received message.
	h := workerotel.Middleware("orders", &workerotel.Config{TracerProvider: tp})(
		worker.HandlerFunc(func(context.Context, *worker.Message) error { return worker.ErrDuplicate }))
	_ = h.Handle(context.Background(), &worker.Message{ID: "m-1", ReceiveCount: 1, Attributes: attrs})

	for _, s := range exp.GetSpans() {
		fmt.Printf("%s (%s), same trace as the producer: %v\n", s.Name, s.SpanKind, s.SpanContext.TraceID() == send.SpanContext().TraceID())
		for _, kv := range s.Attributes {
			if kv.Key == workerotel.KeyOutcome {
				fmt.Println(kv.Key, "=", kv.Value.String())
			}
		}
	}
	// Output:
	// send orders (producer), same trace as the producer: true
	// process orders (consumer), same trace as the producer: true
	// sqsinbox.message.outcome = duplicate
}

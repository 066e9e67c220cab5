package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// A worker on a real queue, stopped on SIGTERM the way ECS stops a task.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	awsCfg, err := config.LoadDefaultConfig(ctx) // honours AWS_ENDPOINT_URL_SQS
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{
		QueueName:   "orders",
		Concurrency: 32,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			log.Printf("message %s, delivery %d", m.ID, m.ReceiveCount)
			return nil // delete it
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 28*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}

// Handlers steer SQS with their results.
func ExampleHandlerFunc() {
	errUnknownType := errors.New("unknown type")
	h := worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		typ, _ := m.Attribute("type")
		switch typ {
		case "OrderPaid":
			return nil // done: deleted
		case "OrderShipped":
			return worker.RetryAfter(time.Minute) // not yet: back in a minute
		case "Legacy":
			return worker.Discard("legacy events are not processed any more") // deleted, logged, counted
		}
		return errUnknownType // retried after the backoff, then dead-lettered
	})
	_ = h
}

// The worker on the in-process fake (worker/sqsfake), which needs no server: three messages
// handled, then a graceful stop that flushes their deletes.
func ExampleWorker_Stop() {
	ctx := context.Background()
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "orders"})
	for _, body := range []string{"a", "b", "c"} {
		_, _ = f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body})
	}
	done := make(chan struct{}, 3)
	w, err := worker.New(f, &worker.Config{QueueURL: url, WaitTime: time.Second,
		Logger: slog.New(slog.DiscardHandler),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			done <- struct{}{}
			return nil
		})})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		<-done
	}
	if err := w.Stop(ctx); err != nil { // flushes the deletes
		log.Fatal(err)
	}
	fmt.Println("left in the queue:", f.Len(url))
	// Output: left in the queue: 0
}

package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// BenchmarkWorkerFake (fake) measures the worker's own cost per message: receive, run a no-op
// handler, batched delete. b.N messages per run; allocations are per message.
func BenchmarkWorkerFake(b *testing.B) {
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprint("c=", c), func(b *testing.B) {
			f := sqsfake.New()
			url := f.CreateQueue(sqsfake.QueueOptions{Name: "bench"})
			msgs := make([]sqstest.Message, b.N)
			for i := range msgs {
				msgs[i] = sqstest.Message{Body: `{"id":"evt_9f3k","order":"o-1"}`}
			}
			if err := sqstest.Send(context.Background(), f, url, msgs); err != nil {
				b.Fatal(err)
			}
			var done atomic.Int64
			all := make(chan struct{})
			w, err := worker.New(f, &worker.Config{QueueURL: url, Concurrency: c, WaitTime: time.Second, Logger: discardLogger(),
				Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error {
					if done.Add(1) == int64(b.N) {
						close(all)
					}
					return nil
				})})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := w.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			<-all
			b.StopTimer()
			if err := w.Stop(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// latencyClient adds a fixed round-trip time to the fake's receives and deletes, like a remote
// SQS.
type latencyClient struct {
	*sqsfake.Fake
	rtt time.Duration
}

func (c latencyClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	time.Sleep(c.rtt)
	return c.Fake.ReceiveMessage(ctx, in, o...)
}

func (c latencyClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	time.Sleep(c.rtt)
	return c.Fake.DeleteMessageBatch(ctx, in, o...)
}

// BenchmarkWorkerLatency (fake with a 1 ms round trip, handlers that wait 2 ms) measures how well
// the worker keeps its slots busy when time goes to waiting rather than CPU, which the machine's
// load disturbs little. "slot-use" is the share of slot time spent inside handlers.
func BenchmarkWorkerLatency(b *testing.B) {
	const work = 2 * time.Millisecond
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprint("c=", c), func(b *testing.B) {
			f := sqsfake.New()
			url := f.CreateQueue(sqsfake.QueueOptions{Name: "bench"})
			msgs := make([]sqstest.Message, b.N)
			for i := range msgs {
				msgs[i] = sqstest.Message{Body: `{"id":"evt_9f3k"}`}
			}
			if err := sqstest.Send(context.Background(), f, url, msgs); err != nil {
				b.Fatal(err)
			}
			var done, busy atomic.Int64
			all := make(chan struct{})
			w, err := worker.New(latencyClient{f, time.Millisecond}, &worker.Config{QueueURL: url, Concurrency: c, WaitTime: time.Second,
				Logger: discardLogger(),
				Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error {
					t0 := time.Now()
					time.Sleep(work)
					busy.Add(int64(time.Since(t0)))
					if done.Add(1) == int64(b.N) {
						close(all)
					}
					return nil
				})})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := w.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			<-all
			b.StopTimer()
			if err := w.Stop(context.Background()); err != nil {
				b.Fatal(err)
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "msgs/s")
			// The share of slot time spent inside handlers (sleeps overshoot on a loaded machine, so
			// the measured handler time is used, not the 2 ms asked for).
			b.ReportMetric(float64(busy.Load())/(float64(c)*float64(b.Elapsed())), "slot-use")
			b.ReportMetric(float64(f.Calls("ReceiveMessage"))/float64(b.N), "receives/msg")
		})
	}
}

package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/sqsfake"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
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

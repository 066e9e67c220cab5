package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/semaphore"

	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// A runner's buffer can come back from holdBack (during a pause) with more capacity than
// HandlerBatch; the next batch must still stop at HandlerBatch. CI once panicked here, slicing the
// outcome array to 16 with a batch of 10. No SQS server: gather reads the ready queue only.
func TestGatherStopsAtHandlerBatch(t *testing.T) {
	t.Parallel()
	w := &Worker{ready: make(chan item, 32), cfg: Config{Linger: time.Millisecond}}
	for range 32 {
		w.ready <- item{m: &Message{}}
	}
	var timer *time.Timer
	buf := make([]*Message, 0, 16) // as holdBack's appends leave it
	for range 3 {
		var open bool
		buf, _, open = w.gather(buf[:0], 10, nil, &timer)
		if !open || len(buf) != 10 {
			t.Fatalf("gather = %d messages (open %v), want 10", len(buf), open)
		}
	}
	// Two left: a short batch once Linger passes.
	buf, _, _ = w.gather(buf[:0], 10, nil, &timer)
	if len(buf) != 2 {
		t.Fatalf("last gather = %d messages, want 2", len(buf))
	}
}

// TestNotStartedHaltsItsGroupInABatch (fake, for the receive and the releases): a FIFO group
// m0..m3 from one receive is one batch, and m2 does not start: a refused SNS envelope, a lease
// lost while it waited, or a message held past MaxHold. m0 and m1 run; m3 must not overtake m2:
// it is not run and is released to the queue. The batch is built by hand, so that each case is
// exact (a server decides none of them).
func TestNotStartedHaltsItsGroupInABatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spoil func(m *Message)
	}{
		{"refused-envelope", func(m *Message) { m.refused = fmt.Errorf("%w: test", ErrSNSEnvelope) }},
		{"lease-lost", func(m *Message) { m.lease.mu.Lock(); m.lease.lost = ErrLeaseLost; m.lease.mu.Unlock() }},
		{"held-too-long", func(m *Message) { m.lease.mu.Lock(); m.lease.lost = errHeldTooLong; m.lease.mu.Unlock() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := sqsfake.New()
			url := f.CreateQueue(sqsfake.QueueOptions{Name: tc.name + ".fifo"})
			for i := range 4 {
				if _, err := f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(fmt.Sprint("m", i)),
					MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(fmt.Sprint(i))}); err != nil {
					t.Fatal(err)
				}
			}
			requested := time.Now()
			out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
				MessageSystemAttributeNames: receiveAttributes})
			if err != nil || len(out.Messages) != 4 {
				t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			w := &Worker{cfg: Config{HandlerTimeout: time.Minute, Backoff: func(int) time.Duration { return 0 }},
				log: log, metrics: nopMetrics{}, now: time.Now, slots: semaphore.NewWeighted(4)}
			w.workCtx, w.workCancel = context.WithCancelCause(ctx)
			w.sw = &sqsWriter{client: f, url: url, fifo: true, metrics: nopMetrics{}, log: log, base: context.Background()}
			w.del = newDeleter(w.sw, time.Millisecond, 10)
			grp := &group{} // all four gathered into the batch
			msgs := make([]*Message, 4)
			for i := range msgs {
				msgs[i] = newMessage(&out.Messages[i], requested)
				msgs[i].group, msgs[i].pos = grp, i
				startHeartbeat(w.sw, msgs[i], time.Minute, time.Now, time.Hour)
			}
			tc.spoil(msgs[2])
			var ran []string
			bh := batchFunc(func(_ context.Context, b *Batch) []error {
				res := make([]error, b.Len())
				for i := range b.Len() {
					res[i] = b.Run(b.Context(i), i, func(context.Context) error {
						ran = append(ran, string(b.Message(i).Body))
						return nil
					})
				}
				return res
			})
			ok := make([]bool, 4)
			w.processBatch(bh, msgs, ok)
			w.del.close()
			for _, m := range msgs {
				m.lease.stop()
			}
			if fmt.Sprint(ran) != "[m0 m1]" || fmt.Sprint(ok) != "[true true false false]" {
				t.Errorf("ran %v, done %v; want [m0 m1] and [true true false false]", ran, ok)
			}
			if st := f.Messages(url)[3]; st.InFlight || st.Deleted {
				t.Errorf("m3: %+v; want it released to the queue", st)
			}
		})
	}
}

// batchFunc is a BatchHandler of a function.
type batchFunc func(ctx context.Context, b *Batch) []error

func (f batchFunc) Handle(context.Context, *Message) error { return errors.New("not batched") }
func (f batchFunc) HandleBatch(ctx context.Context, b *Batch) []error {
	return f(ctx, b)
}

package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

const benchSenders = 4

// BenchmarkRelay measures, in the same run, the relay's publish rate (rows committed before
// Start, until all are marked sent) against a raw loop of SendMessageBatch calls of ten on the
// same server with the same number of senders, and reports the ratio.
func BenchmarkRelay(b *testing.B) {
	skipGoAws(b)
	const n = 5000
	bn := setup(b, nil)
	var rawRate, relayRate float64
	for i := 0; i < b.N; i++ {
		q := srv.CreateQueue(b, sqstest.QueueOptions{Prefix: "bench-raw"})
		rawRate = rawSend(b, q.URL, n)

		q = srv.CreateQueue(b, sqstest.QueueOptions{Prefix: "bench-relay"})
		msgs := make([]outbox.Message, 0, 100)
		for j := range n {
			msgs = append(msgs, outbox.Message{Destination: q.URL, Body: "event " + strconv.Itoa(j)})
			if len(msgs) == cap(msgs) {
				bn.add(b, msgs...)
				msgs = msgs[:0]
			}
		}
		rl, err := outbox.NewRelay(bn.pool, &outbox.RelayConfig{Schema: bn.schema, SQS: srv.Client(), Senders: benchSenders})
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := rl.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Minute)
		for rl.Stats().Published < n && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond) // measuring, not synchronising: the rate is read at the end
		}
		relayRate = float64(rl.Stats().Published) / time.Since(began).Seconds()
		if err := rl.Stop(context.WithoutCancel(b.Context())); err != nil {
			b.Fatal(err)
		}
		if rl.Stats().Published != n {
			b.Fatalf("relay published %d of %d", rl.Stats().Published, n)
		}
	}
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(relayRate, "relay-msgs/s")
	b.ReportMetric(relayRate/rawRate, "ratio")
	fmt.Printf("relay %.0f msgs/s, raw SendMessageBatch %.0f msgs/s, %d senders each: ratio %.2f\n", relayRate, rawRate, benchSenders, relayRate/rawRate)
}

// rawSend sends n messages with benchSenders goroutines of SendMessageBatch calls of ten, and
// returns the rate.
func rawSend(b *testing.B, url string, n int) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	c := srv.Client()
	began := time.Now()
	for range benchSenders {
		wg.Go(func() {
			for {
				start := next.Add(10) - 10
				if start >= int64(n) {
					return
				}
				entries := make([]sqstypes.SendMessageBatchRequestEntry, 10)
				for k := range entries {
					entries[k] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), MessageBody: aws.String("raw " + strconv.Itoa(int(start)+k)),
						MessageAttributes: map[string]sqstypes.MessageAttributeValue{"event_id": {DataType: aws.String("String"), StringValue: aws.String(strconv.Itoa(int(start) + k))}}}
				}
				out, err := c.SendMessageBatch(b.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}, worker.PlainRequestBodies)
				if err != nil || len(out.Failed) > 0 {
					b.Errorf("raw send: %v %v", err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(began).Seconds()
}

// BenchmarkAdd measures a transaction (BEGIN, one business INSERT, COMMIT) with and without an
// Add of the event, alternating in the same run, and reports the overhead per event.
func BenchmarkAdd(b *testing.B) {
	bn := setup(b, nil)
	ctx := b.Context()
	if _, err := bn.pool.Exec(ctx, "CREATE TABLE "+bn.schema+".orders (id bigserial PRIMARY KEY, status text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	insert := "INSERT INTO " + bn.schema + ".orders (status) VALUES ('PAID')"
	msg := outbox.Message{Destination: queueURL, Body: `{"type":"OrderPaid","order":"o-1"}`}
	run := func(withAdd bool) time.Duration {
		began := time.Now()
		err := pgx.BeginFunc(ctx, bn.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert); err != nil {
				return err
			}
			if withAdd {
				_, err := bn.ob.Add(ctx, tx, msg)
				return err
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(began)
	}
	var with, without time.Duration
	for i := 0; i < b.N; i++ {
		without += run(false)
		with += run(true)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(without), "without-ns/tx")
	b.ReportMetric(per(with), "with-ns/tx")
	b.ReportMetric(per(with)/per(without), "ratio")
	b.ReportMetric(per(with)-per(without), "overhead-ns/event")
}

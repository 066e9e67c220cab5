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

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// BenchmarkRelayFIFO measures what FIFO order costs the relay: for a FIFO queue whose messages
// spread over 1, 10 and 100 groups, the relay's publish rate (one message per group in flight,
// so that a failed entry can never be passed by a later one of its group) against a raw loop of
// SendMessageBatch calls of ten consecutive messages with the same number of senders, in the
// same run (fauxqs; GoAws's FIFO queues and SendMessageBatch results are broken). Each run commits
// SQSINBOX_BENCH_FIFO_N rows (1,000 by default).
func BenchmarkRelayFIFO(b *testing.B) {
	srv.Need(b, sqstest.SendBatchResults)
	n := envInt(b, "SQSINBOX_BENCH_FIFO_N", 1000) // rows per run; a larger backlog shows what a claim costs per row queued
	bn := setup(b, nil)
	for i := 0; i < b.N; i++ {
		for _, groups := range []int{1, 10, 100} {
			fifoQueue := func(b *testing.B, bn *bundle, n int, side func(*testing.B, *bundle, string, int, *stopwatch)) benchSide {
				q := srv.CreateQueue(b, sqstest.QueueOptions{Prefix: "benchfifo", FIFO: true})
				sw := &stopwatch{b: b, bn: bn}
				side(b, bn, q.URL, n, sw)
				return benchSide{rate: float64(n) / sw.took.Seconds()}
			}
			raw := fifoQueue(b, bn, n, rawGroupsSide(groups, srv.Client(), benchSenders))
			relay := fifoQueue(b, bn, n, relayGroupsSide(groups, srv.Client(), 0))
			ratio := relay.rate / raw.rate
			fmt.Printf("FIFO, %d groups: relay %.0f msgs/s (its default senders), raw SendMessageBatch %.0f msgs/s (%d senders): ratio %.2f\n",
				groups, relay.rate, raw.rate, benchSenders, ratio)
			b.ReportMetric(ratio, fmt.Sprintf("ratio-%dgroups", groups))
		}
	}
}

// fifoGroup is the group of the j-th message of a run over groups groups, or empty for none.
func fifoGroup(j, groups int) string {
	if groups == 0 {
		return ""
	}
	return "g" + strconv.Itoa(j%groups)
}

// relayGroupsSide commits n rows spread over groups groups (0: no group, a standard queue), then
// times a relay publishing through client with senders senders (0: its default, sized) from
// Start until all are marked sent. The table is emptied afterwards, so that every round starts
// alike.
func relayGroupsSide(groups int, client outbox.SQSClient, senders int) func(*testing.B, *bundle, string, int, *stopwatch) {
	return func(b *testing.B, bn *bundle, url string, n int, sw *stopwatch) {
		msgs := make([]outbox.Message, 0, 100)
		for j := range n {
			msgs = append(msgs, outbox.Message{Destination: url, Body: "event " + strconv.Itoa(j), GroupID: fifoGroup(j, groups)})
			if len(msgs) == cap(msgs) || j == n-1 {
				bn.add(b, msgs...)
				msgs = msgs[:0]
			}
		}
		rl, err := outbox.NewRelay(bn.pool, &outbox.RelayConfig{Schema: bn.schema, SQS: client, Senders: senders})
		if err != nil {
			b.Fatal(err)
		}
		sw.start()
		if err := rl.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Minute)
		for rl.Stats().Published < int64(n) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // measuring, not synchronising: the count is checked below
		}
		sw.stop()
		sw.senders = rl.Stats().Senders
		if err := rl.Stop(context.WithoutCancel(b.Context())); err != nil {
			b.Fatal(err)
		}
		if got := rl.Stats().Published; got != int64(n) {
			b.Fatalf("relay published %d of %d", got, n)
		}
		if _, err := bn.pool.Exec(b.Context(), "TRUNCATE "+bn.schema+".outbox_messages"); err != nil {
			b.Fatal(err)
		}
	}
}

// rawGroupsSide sends n messages spread over groups groups (0: none) through c with senders
// goroutines of SendMessageBatch calls of ten consecutive messages, each entry with an event_id
// attribute as the relay's (no order kept between senders), and times them.
func rawGroupsSide(groups int, c *sqs.Client, senders int) func(*testing.B, *bundle, string, int, *stopwatch) {
	return func(b *testing.B, _ *bundle, url string, n int, sw *stopwatch) {
		var next atomic.Int64
		var wg sync.WaitGroup
		sw.start()
		for range senders {
			wg.Go(func() {
				for {
					start := int(next.Add(10) - 10)
					if start >= n {
						return
					}
					entries := make([]sqstypes.SendMessageBatchRequestEntry, min(10, n-start))
					for k := range entries {
						id := strconv.Itoa(start + k)
						entries[k] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), MessageBody: aws.String("raw " + id),
							MessageAttributes: map[string]sqstypes.MessageAttributeValue{"event_id": {DataType: aws.String("String"), StringValue: aws.String(id)}}}
						if groups > 0 {
							entries[k].MessageGroupId, entries[k].MessageDeduplicationId = aws.String(fifoGroup(start+k, groups)), aws.String(id)
						}
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
		sw.stop()
	}
}

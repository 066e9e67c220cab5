package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// Behaviours of a message that comes back: backoff, the DLQ, the heartbeat, release at Stop.

// TestBackoffFromReceiveCount (every server with receive counts): a message that fails three times
// is delivered with ApproximateReceiveCount 1, 2, 3 and 4; after each failure the worker sets its
// visibility to Config.Backoff of that count rounded up to whole seconds (0.7 s, 1.7 s, 2.7 s make
// 1, 2, 3 s), and the next delivery comes no sooner than that and long before the queue's
// visibility timeout.
func TestBackoffFromReceiveCount(t *testing.T) {
	eachServer(t, needs(sqstest.ReceiveCount), func(t *testing.T, s *server) {
		const vis = 30 * time.Second
		rc := newRecordingClient(s.client)
		q := s.queue(t, sqstest.QueueOptions{Prefix: "backoff", VisibilityTimeout: vis, MaxReceiveCount: 5})
		s.sendOne(t, q.URL, "fails")
		backoff := func(n int) time.Duration { return time.Duration(n)*time.Second - 300*time.Millisecond }
		var mu sync.Mutex
		var asked []int
		var got deliveries
		w := workertest.Start(t, rc, &worker.Config{QueueURL: q.URL, WaitTime: time.Second,
			Backoff: func(n int) time.Duration {
				mu.Lock()
				asked = append(asked, n)
				mu.Unlock()
				return backoff(n)
			},
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				got.add(m)
				if m.ReceiveCount < 4 {
					return errors.New("fails until the fourth delivery")
				}
				return nil
			})})
		s.waitCount(t, q.URL, 0, 30*time.Second)
		workertest.Stop(t, w)

		ds := got.of("fails")
		if fmt.Sprint(receiveCounts(ds)) != "[1 2 3 4]" {
			t.Fatalf("the handler saw receive counts %v, want [1 2 3 4]", receiveCounts(ds))
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(asked) != "[1 2 3]" {
			t.Errorf("Backoff was asked for receive counts %v, want [1 2 3]", asked)
		}
		if v := rc.visibilities(); fmt.Sprint(v) != "[1 2 3]" {
			t.Errorf("visibility set to %v s after the failures, want [1 2 3]", v)
		}
		// A small allowance for the two processes' clocks; the steps are a second apart.
		const slack = 100 * time.Millisecond
		for i := range 3 {
			gap := ds[i+1].at.Sub(ds[i].at)
			if want := backoff(ds[i].count); gap < want-slack {
				t.Errorf("delivery %d came %v after delivery %d, before its backoff of %v", i+2, gap, i+1, want)
			}
			if gap > vis/2 {
				t.Errorf("delivery %d came %v after delivery %d: after the visibility timeout, not the backoff", i+2, gap, i+1)
			}
		}
		s.waitCount(t, q.DLQURL, 0, time.Second)
	})
}

// TestPoisonToDLQ (every server): a message whose handler always fails (Backoff 0) is delivered
// exactly maxReceiveCount (3) times, with ApproximateReceiveCount 1, 2, 3 where the server counts,
// and then is in the DLQ with the same MessageId and body. The worker never deletes it.
func TestPoisonToDLQ(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		q := s.queue(t, sqstest.QueueOptions{Prefix: "poison", MaxReceiveCount: 3})
		id := s.sendOne(t, q.URL, "poison")
		var got deliveries
		met := newTestMetrics()
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Backoff: noBackoff, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				got.add(m)
				return errors.New("always fails")
			})})
		s.waitCount(t, q.DLQURL, 1, 30*time.Second)
		workertest.Stop(t, w)

		ds := got.of("poison")
		if len(ds) != 3 {
			t.Errorf("the handler ran %d times, want maxReceiveCount = 3", len(ds))
		}
		if s.has(sqstest.ReceiveCount) && fmt.Sprint(receiveCounts(ds)) != "[1 2 3]" {
			t.Errorf("the handler saw receive counts %v, want [1 2 3] (maxReceiveCount 3)", receiveCounts(ds))
		}
		for _, d := range ds {
			if d.id != id {
				t.Errorf("a delivery has MessageId %s, want %s", d.id, id)
			}
		}
		if d := met.get(worker.Deleted); d != 0 {
			t.Errorf("the worker deleted %d messages, want 0", d)
		}
		s.waitCount(t, q.URL, 0, time.Second)
		// The DLQ's receive count is not asserted: fauxqs keeps counting there (TESTING.md).
		out, err := s.client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id || aws.ToString(out.Messages[0].Body) != "poison" {
			t.Fatalf("the DLQ holds %+v, want the message %s with body poison", out.Messages, id)
		}
	})
}

// TestHeartbeat (every server with receive counts). The queue's visibility timeout is 2 s and its
// maxReceiveCount 2. A handler that runs more than two visibility timeouts (seven extensions) and
// succeeds keeps its message: it is received once, with count 1, and deleted. A second one that
// runs as long and then fails is received again with count 2 and handled, not dead-lettered: the
// extensions did not count as receives.
func TestHeartbeat(t *testing.T) {
	eachServer(t, needs(sqstest.ReceiveCount), func(t *testing.T, s *server) {
		const vis = 2 * time.Second
		rc := newRecordingClient(s.client)
		q := s.queue(t, sqstest.QueueOptions{Prefix: "heartbeat", VisibilityTimeout: vis, MaxReceiveCount: 2})
		longID := s.sendOne(t, q.URL, "long")
		failID := s.sendOne(t, q.URL, "long-then-fails")
		var got deliveries
		met := newTestMetrics()
		lost := make(chan error, 4)
		w := workertest.Start(t, rc, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Backoff: noBackoff, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				got.add(m)
				if m.ReceiveCount > 1 {
					return nil
				}
				// Seven extensions, one every third of the visibility timeout: over two timeouts.
				if !sqstest.PollUntil(ctx, 30*time.Second, func() bool { return rc.extensions(m.ReceiptHandle) >= 7 }) {
					lost <- fmt.Errorf("%s: %d extensions, context: %s", m.Body, rc.extensions(m.ReceiptHandle), fmt.Sprint(context.Cause(ctx)))
					return errors.New("the lease did not last")
				}
				if string(m.Body) == "long-then-fails" {
					return errors.New("fails after the long run")
				}
				return nil
			})})
		s.waitCount(t, q.URL, 0, 60*time.Second)
		workertest.Stop(t, w)
		select {
		case err := <-lost:
			t.Fatalf("a long handler lost its lease: %v", err)
		default:
		}
		if ds := got.of("long"); fmt.Sprint(receiveCounts(ds)) != "[1]" {
			t.Errorf("long: the handler saw receive counts %v, want [1] (one delivery)", receiveCounts(ds))
		}
		if ds := got.of("long-then-fails"); fmt.Sprint(receiveCounts(ds)) != "[1 2]" {
			t.Errorf("long-then-fails: the handler saw receive counts %v, want [1 2]", receiveCounts(ds))
		}
		if r := rc.receiveCounts(longID); fmt.Sprint(r) != "[1]" {
			t.Errorf("long: received with counts %v, want [1]", r)
		}
		if r := rc.receiveCounts(failID); fmt.Sprint(r) != "[1 2]" {
			t.Errorf("long-then-fails: received with counts %v, want [1 2]", r)
		}
		// The worker counts an extension when it returns, and not the last one if the handler
		// finished meanwhile.
		if h := met.get(worker.Heartbeats); h < 12 {
			t.Errorf("%d heartbeats counted, want at least 12 (6 of the 7 per long run)", h)
		}
		if p := met.get(worker.Processed); p != 2 {
			t.Errorf("processed %d, want 2", p)
		}
		s.waitCount(t, q.DLQURL, 0, time.Second)
	})
}

// TestRedriveAllowPolicy (servers with RedriveAllowPolicy): the DLQ has a RedriveAllowPolicy that
// names the source queue ("byQueue"). The worker's start-up reads the source queue and its DLQ
// without trouble (the redrive policy, the DLQ's 14-day retention), DescribeQueue reads the DLQ
// itself with the policy among its attributes, and a poison message is redriven to that DLQ after
// maxReceiveCount deliveries.
func TestRedriveAllowPolicy(t *testing.T) {
	eachServer(t, needs(sqstest.RedriveAllowPolicy), func(t *testing.T, s *server) {
		c := srv.Client() // a real server: the fake lacks the feature
		q := s.queue(t, sqstest.QueueOptions{Prefix: "allow", MaxReceiveCount: 2})
		arn := func(url string) string { return s.attrs(t, url, types.QueueAttributeNameQueueArn)["QueueArn"] }
		src, dlqArn := arn(q.URL), arn(q.DLQURL)
		policy, _ := json.Marshal(map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []string{src}})
		if _, err := c.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.DLQURL),
			Attributes: map[string]string{string(types.QueueAttributeNameRedriveAllowPolicy): string(policy)}}); err != nil {
			t.Fatal(err)
		}
		if got := s.attrs(t, q.DLQURL, types.QueueAttributeNameRedriveAllowPolicy)["RedriveAllowPolicy"]; got != string(policy) {
			t.Fatalf("the DLQ's RedriveAllowPolicy reads back as %q, want %q", got, policy)
		}

		dq, err := worker.DescribeQueue(t.Context(), c, q.DLQURL)
		if err != nil {
			t.Fatalf("DescribeQueue of the DLQ: %v", err)
		}
		if dq.Attributes["RedriveAllowPolicy"] != string(policy) || dq.DeadLetterTargetARN != "" || dq.MessageRetentionPeriod != 14*24*time.Hour {
			t.Errorf("DescribeQueue of the DLQ: policy %q, redrive target %q, retention %v", dq.Attributes["RedriveAllowPolicy"],
				dq.DeadLetterTargetARN, dq.MessageRetentionPeriod)
		}

		id := s.sendOne(t, q.URL, "poison")
		var seen *worker.Queue
		var got deliveries
		w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Backoff: noBackoff,
			Handler: checker{worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				got.add(m)
				return errors.New("always fails")
			}), func(q *worker.Queue) error { seen = q; return nil }}})
		if seen == nil {
			t.Fatal("the worker started without checking its queue")
		}
		if seen.DeadLetterTargetARN != dlqArn || seen.MaxReceiveCount != 2 || seen.DeadLetterRetentionPeriod != 14*24*time.Hour {
			t.Errorf("the worker read redrive target %q, maxReceiveCount %d, DLQ retention %v; want %q, 2, 336h",
				seen.DeadLetterTargetARN, seen.MaxReceiveCount, seen.DeadLetterRetentionPeriod, dlqArn)
		}
		s.waitCount(t, q.DLQURL, 1, 30*time.Second)
		workertest.Stop(t, w)
		if ds := got.of("poison"); len(ds) != 2 {
			t.Errorf("the handler ran %d times, want maxReceiveCount = 2", len(ds))
		}
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id {
			t.Errorf("the DLQ holds %+v, want the message %s", out.Messages, id)
		}
	})
}

// TestStopReleases (servers with ChangeMessageVisibilityBatch and DelaySeconds): five messages,
// sent with a 1 s delay to an empty queue, arrive in the long poll in progress when Stop is
// called; the worker releases them unrun with one ChangeMessageVisibilityBatch (visibility 0, no
// single calls), and they are visible at once. (TestStopReleasesHeldGroup releases messages held
// behind a running one of their group, and the fallback to single calls.)
func TestStopReleases(t *testing.T) {
	eachServer(t, needs(sqstest.VisibilityBatch), func(t *testing.T, s *server) {
		const n = 5
		rc := newRecordingClient(s.client)
		q := s.queue(t, sqstest.QueueOptions{Prefix: "release"})
		met := newTestMetrics()
		var got deliveries
		w := workertest.Start(t, rc, &worker.Config{QueueURL: q.URL, Pollers: 1, WaitTime: 20 * time.Second, Metrics: met,
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				got.add(m)
				return nil
			})})
		sqstest.WaitFor(t, 10*time.Second, "a long poll in progress", func() (bool, string) { return rc.receivesInProgress() == 1, "" })
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i := range entries {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprint("m", i)), DelaySeconds: 1}
		}
		if _, err := rc.SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries}); err != nil {
			t.Fatal(err)
		}
		// Stop is called long before the delay ends, and gives the receive in progress 2 s.
		workertest.Stop(t, w)

		if n := got.count(); n != 0 {
			t.Fatalf("%d messages ran; the receive came back before Stop and the test did not test the release", n)
		}
		if r := met.get(worker.Released); r != n {
			t.Fatalf("released %d, want %d", r, n)
		}
		rc.mu.Lock()
		batches, zero := fmt.Sprint(rc.batches), rc.batchVis[0]
		rc.mu.Unlock()
		if batches != "[5]" || zero != n {
			t.Errorf("ChangeMessageVisibilityBatch calls with %s entries, %d of them to visibility 0; want one call of %d", batches, zero, n)
		}
		if v := rc.visibilities(); len(v) != 0 {
			t.Errorf("single ChangeMessageVisibility calls %v; want none", v)
		}
		a := s.attrs(t, q.URL, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
		if a["ApproximateNumberOfMessages"] != strconv.Itoa(n) || a["ApproximateNumberOfMessagesNotVisible"] != "0" {
			t.Errorf("after Stop: %s visible, %s not visible; want %d and 0", a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"], n)
		}
	})
}

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

	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// The tests in this file need behaviour that GoAws lacks and fauxqs has (TESTING.md lists both
// servers' quirks). They are the real-server versions of tests that also run on the fake; on any
// other server they skip, saying why. Each is named ...Fauxqs.

// needFauxqs skips t unless the tests run against fauxqs.
func needFauxqs(t *testing.T, why string) {
	t.Helper()
	if srv.Kind != sqstest.KindFauxqs {
		t.Skipf("needs fauxqs: %s (this pass runs against %s)", why, srv.Kind)
	}
}

// recordingClient is the harness's SQS client with a record of the visibility calls the worker
// makes and of its receives in progress. It changes nothing: every call goes to the server.
type recordingClient struct {
	*sqs.Client

	mu          sync.Mutex
	vis         []int32          // VisibilityTimeout of each ChangeMessageVisibility, in order
	visByHandle map[string]int   // successful ChangeMessageVisibility calls per receipt handle
	batches     []int            // entries of each ChangeMessageVisibilityBatch
	batchVis    map[int32]int    // entries of those batches per VisibilityTimeout
	receiving   int              // ReceiveMessage calls in progress
	received    map[string][]int // ApproximateReceiveCount of each delivery, by MessageId
}

func newRecordingClient() *recordingClient {
	return &recordingClient{Client: srv.Client(), visByHandle: map[string]int{}, batchVis: map[int32]int{},
		received: map[string][]int{}}
}

func (c *recordingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.mu.Lock()
	c.receiving++
	c.mu.Unlock()
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.receiving--
	if err == nil {
		for _, m := range out.Messages {
			n, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
			c.received[aws.ToString(m.MessageId)] = append(c.received[aws.ToString(m.MessageId)], n)
		}
	}
	return out, err
}

func (c *recordingClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.mu.Lock()
	c.vis = append(c.vis, in.VisibilityTimeout)
	c.mu.Unlock()
	out, err := c.Client.ChangeMessageVisibility(ctx, in, optFns...)
	if err == nil {
		c.mu.Lock()
		c.visByHandle[aws.ToString(in.ReceiptHandle)]++
		c.mu.Unlock()
	}
	return out, err
}

func (c *recordingClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.mu.Lock()
	c.batches = append(c.batches, len(in.Entries))
	for _, e := range in.Entries {
		c.batchVis[e.VisibilityTimeout]++
	}
	c.mu.Unlock()
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (c *recordingClient) visibilities() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int32(nil), c.vis...)
}

func (c *recordingClient) extensions(handle string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.visByHandle[handle]
}

func (c *recordingClient) receivesInProgress() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.receiving
}

func (c *recordingClient) receiveCounts(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.received[id]...)
}

// delivery is one handler call as a test records it.
type delivery struct {
	id    string
	body  string
	count int // ApproximateReceiveCount
	at    time.Time
}

// deliveries records handler calls.
type deliveries struct {
	mu  sync.Mutex
	all []delivery
}

func (d *deliveries) add(m *worker.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = append(d.all, delivery{id: m.ID, body: string(m.Body), count: m.ReceiveCount, at: time.Now()})
}

func (d *deliveries) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.all)
}

// of returns the deliveries of the message with the body given, in order.
func (d *deliveries) of(body string) []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []delivery
	for _, x := range d.all {
		if x.body == body {
			out = append(out, x)
		}
	}
	return out
}

func receiveCounts(ds []delivery) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.count
	}
	return out
}

// sendOne sends one message and returns its MessageId.
func sendOne(t *testing.T, url, body string) string {
	t.Helper()
	out, err := srv.Client().SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// queueArn returns the ARN of the queue at url.
func queueArn(t *testing.T, url string) string {
	t.Helper()
	return queueAttrs(t, url, types.QueueAttributeNameQueueArn)["QueueArn"]
}

func queueAttrs(t *testing.T, url string, names ...types.QueueAttributeName) map[string]string {
	t.Helper()
	out, err := srv.Client().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes
}

// TestBackoffFromReceiveCountFauxqs (fauxqs) is TestBackoffFromReceiveCountFake on a real server:
// a message that fails three times is delivered with ApproximateReceiveCount 1, 2, 3 and 4; after
// each failure the worker sets its visibility to Config.Backoff of that count (1 s, 2 s, 3 s), and
// the next delivery comes no sooner than that and long before the queue's visibility timeout. It
// needs fauxqs because GoAws reports ApproximateReceiveCount 1 on every delivery.
func TestBackoffFromReceiveCountFauxqs(t *testing.T) {
	needFauxqs(t, "GoAws reports ApproximateReceiveCount 1 on every delivery")
	t.Parallel()
	const vis = 30 * time.Second
	rc := newRecordingClient()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "backoff", VisibilityTimeout: vis, MaxReceiveCount: 5})
	sendOne(t, q.URL, "fails")
	backoff := func(n int) time.Duration { return time.Duration(n) * time.Second }
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
	sqstest.WaitCount(t, rc, q.URL, 0, 30*time.Second)
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
	sqstest.WaitCount(t, rc, q.DLQURL, 0, time.Second)
}

// TestPoisonToDLQFauxqs (fauxqs) is TestPoisonToDLQGoAws with the counts GoAws cannot show: a
// message whose handler always fails (Backoff 0) is delivered exactly maxReceiveCount (3) times,
// with ApproximateReceiveCount 1, 2, 3, and then is in the DLQ with the same MessageId and body.
// It needs fauxqs because GoAws reports ApproximateReceiveCount 1 on every delivery.
func TestPoisonToDLQFauxqs(t *testing.T) {
	needFauxqs(t, "GoAws reports ApproximateReceiveCount 1 on every delivery")
	t.Parallel()
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "poison", MaxReceiveCount: 3})
	id := sendOne(t, q.URL, "poison")
	var got deliveries
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Backoff: noBackoff,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			got.add(m)
			return errors.New("always fails")
		})})
	sqstest.WaitCount(t, c, q.DLQURL, 1, 30*time.Second)
	workertest.Stop(t, w)

	ds := got.of("poison")
	if fmt.Sprint(receiveCounts(ds)) != "[1 2 3]" {
		t.Errorf("the handler saw receive counts %v, want [1 2 3] (maxReceiveCount 3)", receiveCounts(ds))
	}
	for _, d := range ds {
		if d.id != id {
			t.Errorf("a delivery has MessageId %s, want %s", d.id, id)
		}
	}
	sqstest.WaitCount(t, c, q.URL, 0, time.Second)
	// The DLQ's receive count is not asserted: fauxqs keeps counting there (TESTING.md).
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != id || aws.ToString(out.Messages[0].Body) != "poison" {
		t.Fatalf("the DLQ holds %+v, want the message %s with body poison", out.Messages, id)
	}
}

// TestHeartbeatFauxqs (fauxqs) is TestHeartbeatFake on a real server. The queue's visibility
// timeout is 2 s and its maxReceiveCount 2. A handler that runs more than two visibility timeouts
// (seven extensions) and succeeds keeps its message: it is received once, with count 1, and
// deleted. A second one that runs as long and then fails is received again with count 2 and
// handled, not dead-lettered: the extensions did not count as receives. It needs fauxqs because
// GoAws reports ApproximateReceiveCount 1 on every delivery, so an extension counted as a receive
// would not show.
func TestHeartbeatFauxqs(t *testing.T) {
	needFauxqs(t, "GoAws reports ApproximateReceiveCount 1 on every delivery, so an extension counted as a receive would not show")
	t.Parallel()
	const vis = 2 * time.Second
	rc := newRecordingClient()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "heartbeat", VisibilityTimeout: vis, MaxReceiveCount: 2})
	longID := sendOne(t, q.URL, "long")
	failID := sendOne(t, q.URL, "long-then-fails")
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
			if !pollUntil(ctx, 30*time.Second, func() bool { return rc.extensions(m.ReceiptHandle) >= 7 }) {
				lost <- fmt.Errorf("%s: %d extensions, context: %s", m.Body, rc.extensions(m.ReceiptHandle), fmt.Sprint(context.Cause(ctx)))
				return errors.New("the lease did not last")
			}
			if string(m.Body) == "long-then-fails" {
				return errors.New("fails after the long run")
			}
			return nil
		})})
	sqstest.WaitCount(t, rc, q.URL, 0, 60*time.Second)
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
	sqstest.WaitCount(t, rc, q.DLQURL, 0, time.Second)
}

// TestRedriveAllowPolicyFauxqs (fauxqs): the DLQ has a RedriveAllowPolicy that names the source
// queue ("byQueue"). The worker's start-up reads the source queue and its DLQ without trouble (the
// redrive policy, the DLQ's 14-day retention), DescribeQueue reads the DLQ itself with the policy
// among its attributes, and a poison message is redriven to that DLQ after maxReceiveCount
// deliveries. It needs fauxqs because GoAws refuses the attribute (InvalidParameterValue).
func TestRedriveAllowPolicyFauxqs(t *testing.T) {
	needFauxqs(t, "GoAws refuses RedriveAllowPolicy with InvalidParameterValue")
	t.Parallel()
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "allow", MaxReceiveCount: 2})
	src, dlqArn := queueArn(t, q.URL), queueArn(t, q.DLQURL)
	policy, _ := json.Marshal(map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []string{src}})
	if _, err := c.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.DLQURL),
		Attributes: map[string]string{string(types.QueueAttributeNameRedriveAllowPolicy): string(policy)}}); err != nil {
		t.Fatal(err)
	}
	if got := queueAttrs(t, q.DLQURL, types.QueueAttributeNameRedriveAllowPolicy)["RedriveAllowPolicy"]; got != string(policy) {
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

	id := sendOne(t, q.URL, "poison")
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
	sqstest.WaitCount(t, c, q.DLQURL, 1, 30*time.Second)
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
}

// TestStopReleasesFauxqs (fauxqs) is TestStopReleasesFake's batch case on a real server, reached
// another way: fauxqs returns one message per FIFO group per receive, so no message waits behind a
// running one. Instead five messages, sent with a 1 s delay to an empty queue, arrive in the long
// poll in progress when Stop is called; the worker releases them unrun with one
// ChangeMessageVisibilityBatch (visibility 0, no single calls), and they are visible at once. It
// needs fauxqs because GoAws lacks ChangeMessageVisibilityBatch (the worker then falls back to
// single calls, which TestStopReleasesFake covers) and ignores DelaySeconds.
func TestStopReleasesFauxqs(t *testing.T) {
	needFauxqs(t, "GoAws lacks ChangeMessageVisibilityBatch and ignores DelaySeconds")
	t.Parallel()
	const n = 5
	rc := newRecordingClient()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "release"})
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
	a := queueAttrs(t, q.URL, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	if a["ApproximateNumberOfMessages"] != strconv.Itoa(n) || a["ApproximateNumberOfMessagesNotVisible"] != "0" {
		t.Errorf("after Stop: %s visible, %s not visible; want %d and 0", a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"], n)
	}
}

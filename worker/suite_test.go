package worker_test

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// The worker's tests are one behaviour suite. Each behaviour runs, with eachServer, on every SQS
// server of the pass: the real one the harness started or was pointed at (GoAws on the first
// pass of `make test`, fauxqs on the second, or AWS_ENDPOINT_URL_SQS's server) and the in-process
// fake (worker/sqsfake), the only one that injects faults. A test declares the features it needs
// (sqstest.Feature); a server that lacks one skips it and says why, so every test runs wherever
// it can, and the skips list what each server cannot show. Subtests are named after the server.

// fakeName names the in-process fake among the servers.
const fakeName = "fake"

// fakeLacks is what the fake lacks, and why.
var fakeLacks = map[sqstest.Feature]string{
	sqstest.Wire:               "it is in-process: no HTTP, so the SDK's transport, retries and request bodies are not exercised",
	sqstest.RedriveAllowPolicy: "it has no SetQueueAttributes",
	sqstest.ContentDedup:       "it does not deduplicate",
}

// client is what the tests call on a server: the worker's calls and sends.
type client interface {
	worker.SQSClient
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// server is one SQS server a behaviour runs on.
type server struct {
	name   string
	fake   *sqsfake.Fake // the fake's own controls; nil on a real server
	client client
}

// eachServer runs the behaviour run as one parallel subtest per server, skipping it, with the
// reason, on a server that lacks one of needs.
func eachServer(t *testing.T, needs []sqstest.Feature, run func(t *testing.T, s *server)) {
	t.Helper()
	t.Parallel()
	for _, name := range []string{string(srv.Kind), fakeName} {
		t.Run(name, func(t *testing.T) {
			s := &server{name: name}
			if msg := sqstest.NeedMessage(name, s.lacks, needs); msg != "" {
				t.Skip(msg)
			}
			t.Parallel()
			if name == fakeName {
				s.fake = sqsfake.New()
				s.client = s.fake
			} else {
				s.client = newClient(t)
			}
			run(t, s)
		})
	}
}

// fresh returns s with a fake of its own, for a subtest that sets faults: the fake's faults are
// one set for all its queues, so parallel subtests must not share it. A real server is shared.
func (s *server) fresh() *server {
	if s.fake == nil {
		return s
	}
	f := sqsfake.New()
	return &server{name: s.name, fake: f, client: f}
}

// needs lists features, for eachServer.
func needs(fs ...sqstest.Feature) []sqstest.Feature { return fs }

// lacks says why s lacks f, or "" when it has it.
func (s *server) lacks(f sqstest.Feature) string {
	if s.name == fakeName {
		return fakeLacks[f]
	}
	return srv.Lacks(f)
}

// need skips t, saying why, unless s has every feature in fs: for a subtest that needs more
// than its test.
func (s *server) need(t *testing.T, fs ...sqstest.Feature) {
	t.Helper()
	if msg := sqstest.NeedMessage(s.name, s.lacks, fs); msg != "" {
		t.Skip(msg)
	}
}

// has says whether s has f, for an assertion only some servers can support.
func (s *server) has(f sqstest.Feature) bool { return s.lacks(f) == "" }

// queue creates a queue (and its DLQ when o asks for one) named after the test.
func (s *server) queue(t *testing.T, o sqstest.QueueOptions) *sqstest.Queue {
	t.Helper()
	if s.fake == nil {
		return srv.CreateQueue(t, o)
	}
	suffix := ""
	if o.FIFO {
		suffix = ".fifo"
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + o.Prefix
	q := &sqstest.Queue{Name: name + suffix}
	fo := sqsfake.QueueOptions{Name: q.Name, VisibilityTimeout: o.VisibilityTimeout, Retention: o.Retention}
	if o.MaxReceiveCount > 0 {
		q.DLQURL = s.fake.CreateQueue(sqsfake.QueueOptions{Name: name + "-dlq" + suffix, Retention: 14 * 24 * time.Hour})
		fo.DeadLetterQueue, fo.MaxReceiveCount = q.DLQURL, o.MaxReceiveCount
	}
	q.URL = s.fake.CreateQueue(fo)
	return q
}

// send sends msgs to the queue at url. On a FIFO queue a message without a DedupID gets its body
// as one (the queues have no content-based deduplication).
func (s *server) send(t *testing.T, url string, msgs []sqstest.Message) {
	t.Helper()
	if strings.HasSuffix(url, ".fifo") {
		msgs = slices.Clone(msgs)
		for i := range msgs {
			msgs[i].DedupID = cmp.Or(msgs[i].DedupID, msgs[i].Body)
		}
	}
	if err := sqstest.Send(t.Context(), s.client, url, msgs); err != nil {
		t.Fatal(err)
	}
}

// sendOne sends one message and returns its MessageId.
func (s *server) sendOne(t *testing.T, url, body string) string {
	t.Helper()
	out, err := s.client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// waitCount waits until the queue at url holds n messages, visible, in flight or delayed.
func (s *server) waitCount(t *testing.T, url string, n int, timeout time.Duration) {
	t.Helper()
	if s.fake == nil {
		sqstest.WaitCount(t, s.client, url, n, timeout)
		return
	}
	sqstest.WaitFor(t, timeout, strconv.Itoa(n)+" messages in the queue", func() (bool, string) {
		got := s.fake.Len(url)
		return got == n, strconv.Itoa(got) + " messages"
	})
}

// attrs reads attributes of the queue at url.
func (s *server) attrs(t *testing.T, url string, names ...types.QueueAttributeName) map[string]string {
	t.Helper()
	out, err := s.client.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes
}

// recordingClient is a server's client with a record of the visibility calls the worker makes
// and of its receives in progress. It changes nothing: every call goes to the server.
type recordingClient struct {
	client

	mu          sync.Mutex
	vis         []int32          // VisibilityTimeout of each ChangeMessageVisibility, in order
	visByHandle map[string]int   // successful ChangeMessageVisibility calls per receipt handle
	batches     []int            // entries of each ChangeMessageVisibilityBatch
	batchVis    map[int32]int    // entries of those batches per VisibilityTimeout
	receiving   int              // ReceiveMessage calls in progress
	received    map[string][]int // ApproximateReceiveCount of each delivery, by MessageId
}

func newRecordingClient(c client) *recordingClient {
	return &recordingClient{client: c, visByHandle: map[string]int{}, batchVis: map[int32]int{}, received: map[string][]int{}}
}

func (c *recordingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.mu.Lock()
	c.receiving++
	c.mu.Unlock()
	out, err := c.client.ReceiveMessage(ctx, in, optFns...)
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
	out, err := c.client.ChangeMessageVisibility(ctx, in, optFns...)
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
	return c.client.ChangeMessageVisibilityBatch(ctx, in, optFns...)
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

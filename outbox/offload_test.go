package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// The relay offloading bodies to S3: the pass's SQS server and its S3 (fauxqs; GoAws has no S3,
// and these tests skip there, saying so), and a real PostgreSQL.

type payloadKit struct {
	s3     *s3.Client
	bucket string
	w      *s3payload.Writer
	r      *s3payload.Reader
}

func payloadSetup(t *testing.T) *payloadKit {
	t.Helper()
	srv.Need(t, sqstest.S3)
	c, err := srv.S3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	k := &payloadKit{s3: c}
	if k.bucket, err = srv.CreateBucket(t.Context(), c, "outbox"); err != nil {
		t.Fatal(err)
	}
	if k.w, err = s3payload.NewWriter(s3payload.WriterConfig{S3: c, Bucket: k.bucket}); err != nil {
		t.Fatal(err)
	}
	if k.r, err = s3payload.NewReader(s3payload.ReaderConfig{S3: c, Buckets: []string{k.bucket}}); err != nil {
		t.Fatal(err)
	}
	return k
}

// objects returns the number of objects under prefix.
func (k *payloadKit) objects(t *testing.T, prefix string) int {
	t.Helper()
	out, err := k.s3.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(k.bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Contents)
}

// resolve fetches what a received message points to, as the worker does, and returns its body.
func (k *payloadKit) resolve(t *testing.T, m sqstypes.Message) (string, bool) {
	t.Helper()
	wm := &worker.Message{Body: []byte(aws.ToString(m.Body)), Attributes: m.MessageAttributes}
	size, offloaded := wm.OffloadedSize()
	if !offloaded {
		return string(wm.Body), false
	}
	got, release := k.r.Fetch(t.Context(), []s3payload.Ref{{Body: wm.Body, Size: size}})
	defer release()
	if got[0].Err != nil {
		t.Fatal(got[0].Err)
	}
	return string(got[0].Data), true
}

func big(c byte, n int) string { return `{"lines":"` + strings.Repeat(string(c), n) + `"}` }

// TestRelayOffloads (fauxqs; GoAws lacks S3): with MaxOffloadSize, Add takes bodies past the
// queue's 256 KiB; the relay puts them in S3 and publishes a pointer with ExtendedPayloadSize,
// batched with the small ones; the reader gets each payload back byte for byte. Add refuses a
// body over MaxOffloadSize, and every body over the limit without it.
func TestRelayOffloads(t *testing.T) {
	t.Parallel()
	k := payloadSetup(t)
	b := setup(t, &outbox.Config{MaxOffloadSize: 2 << 20})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-offload"})
	bodies := map[string]bool{}
	var msgs []outbox.Message
	for i, body := range []string{big('a', 300<<10), `{"small":1}`, big('b', 1<<20), `{"small":2}`, big('c', 256<<10)} {
		bodies[body] = i%2 == 0
		msgs = append(msgs, outbox.Message{Destination: q.URL, Body: body})
	}
	b.add(t, msgs...)
	tx := b.tx(t)
	if _, err := b.ob.Add(t.Context(), tx, outbox.Message{Destination: q.URL, Body: big('d', 3<<20)}); err == nil || !strings.Contains(err.Error(), "the largest body offloaded to S3 is 2097152 (Config.MaxOffloadSize)") {
		t.Errorf("Add of a 3 MiB body = %v; want refused by MaxOffloadSize", err)
	}
	plain := setup(t, nil)
	if _, err := plain.ob.Add(t.Context(), plain.tx(t), outbox.Message{Destination: q.URL, Body: big('e', 300<<10)}); err == nil || !strings.Contains(err.Error(), "the limit for this destination is 262144") {
		t.Errorf("Add of a 300 KiB body without MaxOffloadSize = %v; want refused", err)
	}
	rl := b.startRelay(t, outbox.RelayConfig{Payloads: k.w})
	got := receive(t, q.URL, len(msgs))
	for _, m := range got {
		body, offloaded := k.resolve(t, m)
		want, known := bodies[body]
		if !known || offloaded != want {
			t.Errorf("event %s: a body of %d bytes, offloaded %v; want one of those added, offloaded when over 256 KiB", eventID(m), len(body), offloaded)
		}
		delete(bodies, body)
	}
	if n := k.objects(t, s3payload.DefaultPrefix); n != 3 {
		t.Errorf("%d objects in the bucket; want 3", n)
	}
	waitStats(t, "5 published", func() bool { return rl.Stats().Published == 5 }, rl)
}

// failOnce fails the relay's first SendMessageBatch call whole, after the relay has put the
// payloads in S3: a relay that dies between its upload and its publish, as its successor sees
// it (the rows come back, the objects are there). A fake for the fault only; the rest goes to
// the real server.
type failOnce struct {
	next  outbox.SQSClient
	calls atomic.Int64
}

func (f *failOnce) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if f.calls.Add(1) == 1 {
		return nil, errors.New("injected: the relay died after its upload, before the publish")
	}
	return f.next.SendMessageBatch(ctx, in, optFns...)
}

// TestRelayOffloadRepublishOneObject (fauxqs; GoAws lacks S3): the publish after an upload
// fails; the row is published again, its upload rewrites the same object (one object for the
// event), and the queue gets the event once.
func TestRelayOffloadRepublishOneObject(t *testing.T) {
	t.Parallel()
	k := payloadSetup(t)
	b := setup(t, &outbox.Config{MaxOffloadSize: 1 << 20})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-offload-crash"})
	body := big('z', 400<<10)
	ids := b.add(t, outbox.Message{Destination: q.URL, Body: body, EventID: "evt_crash"})
	f := &failOnce{next: srv.Client()}
	rl := b.startRelay(t, outbox.RelayConfig{SQS: f, Payloads: k.w})
	got := receive(t, q.URL, 1)
	if got, _ := k.resolve(t, got[0]); got != body || ids[0] != "evt_crash" {
		t.Errorf("received a body of %d bytes; want the %d added", len(got), len(body))
	}
	waitStats(t, "1 published after 1 failure", func() bool { s := rl.Stats(); return s.Published == 1 && s.Failures == 1 }, rl)
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d publish calls; want 2 (the failed one and its retry)", n)
	}
	if n := k.objects(t, s3payload.DefaultPrefix+"evt_crash/"); n != 1 {
		t.Errorf("%d objects for evt_crash; want 1, written twice", n)
	}
	empty(t, q.URL)
}

// TestRelayOffloadsToTopic (fauxqs; GoAws lacks S3): to an SNS topic the relay publishes the same
// pointer and size attribute; a queue subscribed without raw delivery gets them in the envelope,
// and the worker's unwrapping and fetch give the payload back.
func TestRelayOffloadsToTopic(t *testing.T) {
	t.Parallel()
	k := payloadSetup(t)
	srv.SkipWithoutSNS(t)
	b := setup(t, &outbox.Config{MaxOffloadSize: 1 << 20})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-offload-sns"})
	tp := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "outbox-offload"})
	srv.Subscribe(t, tp, q, sqstest.SubscribeOptions{Raw: false})
	sc, err := srv.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	body := big('s', 300<<10)
	b.add(t, outbox.Message{Destination: tp.ARN, Body: body})
	b.startRelay(t, outbox.RelayConfig{SNS: sc, Payloads: k.w})
	got := receive(t, q.URL, 1)
	wm := &worker.Message{Body: []byte(aws.ToString(got[0].Body)), Attributes: got[0].MessageAttributes}
	if err := worker.UnwrapSNS(wm, worker.SNSEnvelope); err != nil {
		t.Fatal(err)
	}
	size, _ := wm.OffloadedSize()
	payloads, release := k.r.Fetch(t.Context(), []s3payload.Ref{{Body: wm.Body, Size: size}})
	defer release()
	if p := payloads[0]; p.Err != nil || string(p.Data) != body || wm.SNS == nil {
		t.Errorf("through the topic: %v, a body of %d bytes, enveloped %v; want the %d added, enveloped", p.Err, len(p.Data), wm.SNS != nil, len(body))
	}
}

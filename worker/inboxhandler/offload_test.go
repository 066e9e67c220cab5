package inboxhandler_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sqsinbox/sqsinbox/harness/extclient"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Payloads offloaded to S3, end to end: the pass's SQS server for the queues, its S3 for the
// payloads (fauxqs serves both; on GoAws, which has no S3, these tests skip and say so), and the
// inbox in PostgreSQL.

// offloadKit is a test's payload bucket, with the writer that fills it and the reader a worker
// fetches with.
type offloadKit struct {
	s3     *s3.Client
	bucket string
	w      *s3payload.Writer
	r      *s3payload.Reader
}

func offloadSetup(t *testing.T, maxPayload int64) *offloadKit {
	t.Helper()
	srv.Need(t, sqstest.S3)
	c, err := srv.S3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	k := &offloadKit{s3: c}
	if k.bucket, err = srv.CreateBucket(t.Context(), c, "payloads"); err != nil {
		t.Fatal(err)
	}
	if k.w, err = s3payload.NewWriter(s3payload.WriterConfig{S3: c, Bucket: k.bucket}); err != nil {
		t.Fatal(err)
	}
	if k.r, err = s3payload.NewReader(s3payload.ReaderConfig{S3: c, Buckets: []string{k.bucket}, MaxPayload: maxPayload}); err != nil {
		t.Fatal(err)
	}
	return k
}

// bigOrderPaid is an OrderPaid event of about size bytes.
func bigOrderPaid(id string, size int) string {
	head := fmt.Sprintf(`{"id":%q,"type":"OrderPaid","order_id":"ord-%s","lines":"`, id, id)
	return head + strings.Repeat("x", max(size-len(head)-2, 0)) + `"}`
}

// offloaded puts payload in the bucket as the writer does and returns the message that points
// to it, with the event_id attribute when attr is set.
func (k *offloadKit) offloaded(t *testing.T, id, payload string, attr bool) sqstest.Message {
	t.Helper()
	o, err := k.w.Put(t.Context(), id, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	m := sqstest.Message{Body: o.Body, Numbers: map[string]string{o.Attribute: o.Size}}
	if attr {
		m.Attributes = map[string]string{"event_id": id}
	}
	return m
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestOffloadedPayloadsOnce (fauxqs; GoAws lacks S3): 60 events, a fifth of them offloaded (300
// KiB each, past SQS's old limit), half of those without the event_id attribute; every event is
// sent twice. Each is applied exactly once under its own key (the attribute, else the payload's
// id), the handler sees each offloaded payload byte for byte as if it had come inline, and the
// objects are still there afterwards: the worker never deletes one.
func TestOffloadedPayloadsOnce(t *testing.T) {
	t.Parallel()
	k := offloadSetup(t, 0)
	b := fxSetup(t)
	s := &subscriber{name: "warehouse", q: srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "offload", MaxReceiveCount: 5}),
		met: &counters{}, payloads: k.r}
	ids := eventIDs("big", 60)
	var msgs []sqstest.Message
	payloads := map[string]string{}
	for i, id := range ids {
		if i%5 == 0 {
			payloads[id] = bigOrderPaid(id, 300<<10)
			msgs = append(msgs, k.offloaded(t, id, payloads[id], i%10 == 0))
			continue
		}
		msgs = append(msgs, orderPaid(id))
	}
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, append(msgs, msgs...)); err != nil {
		t.Fatal(err)
	}
	b.start(t, s, nil)
	waitHandled(t, s, 120)
	b.checkEach(t, []string{"warehouse"}, ids)
	for id, p := range payloads {
		var got string
		if err := b.pool.QueryRow(t.Context(), `SELECT encode(sha256(convert_to(body, 'UTF8')), 'hex') FROM `+b.schema+`.fx WHERE event_id = $1`, id).Scan(&got); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got != sha(p) {
			t.Errorf("%s: the handler saw a body of SHA-256 %s; want the payload's, %s", id, got, sha(p))
		}
		key := s3payload.ObjectKey(s3payload.DefaultPrefix, id, []byte(p))
		if _, err := k.s3.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(k.bucket), Key: aws.String(key)}); err != nil {
			t.Errorf("%s: the object is gone after processing: %v", id, err)
		}
	}
	if p, d, f := s.met.processed.Load(), s.met.duplicates.Load(), s.met.failed.Load(); p != 60 || d != 60 || f != 0 {
		t.Errorf("processed %d, duplicates %d, failed %d; want 60, 60, 0", p, d, f)
	}
}

// TestOffloadRefusals (fauxqs; GoAws lacks S3): messages whose payload the worker must not or
// cannot fetch go the retry-then-DLQ way, never reach the handler, and the log names the object:
// a bucket not allowed, a missing object, a malformed pointer, a payload over the reader's bound
// (by its attribute, and by its object when the attribute understates it). A body shaped like a
// pointer but without the size attribute is an ordinary body: applied as sent, never fetched.
// An event after them is applied: the worker goes on.
func TestOffloadRefusals(t *testing.T) {
	t.Parallel()
	k := offloadSetup(t, 64<<10)
	b := fxSetup(t)
	s := &subscriber{name: "warehouse", q: srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "offload-bad", MaxReceiveCount: 3}),
		met: &counters{}, payloads: k.r}
	other, err := srv.CreateBucket(t.Context(), k.s3, "other")
	if err != nil {
		t.Fatal(err)
	}
	ow, err := s3payload.NewWriter(s3payload.WriterConfig{S3: k.s3, Bucket: other})
	if err != nil {
		t.Fatal(err)
	}
	refused, err := ow.Put(t.Context(), "evt_refused", []byte(bigOrderPaid("evt_refused", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	small := k.offloaded(t, "evt_understated", bigOrderPaid("evt_understated", 10<<10), true)
	small.Numbers = map[string]string{worker.PayloadSizeAttribute: "1000"} // the object is larger than it says
	missing := s3payload.Pointer{Bucket: k.bucket, Key: "sqsinbox/evt_missing/none"}
	lookalike := s3payload.Pointer{Bucket: other, Key: refused.Pointer.Key}.Body()
	size := map[string]string{worker.PayloadSizeAttribute: "1000"}
	msgs := []sqstest.Message{
		{Body: refused.Body, Numbers: map[string]string{refused.Attribute: refused.Size}, Attributes: map[string]string{"event_id": "evt_refused"}},
		{Body: missing.Body(), Numbers: size, Attributes: map[string]string{"event_id": "evt_missing"}},
		{Body: `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":`, Numbers: size, Attributes: map[string]string{"event_id": "evt_malformed"}},
		k.offloaded(t, "evt_huge", bigOrderPaid("evt_huge", 100<<10), true),
		small,
	}
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	b.start(t, s, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sqstest.WaitCount(t, srv.Client(), s.q.DLQURL, len(msgs), 60*time.Second)
	after := []sqstest.Message{orderPaid("evt_after"), {Body: lookalike, Attributes: map[string]string{"event_id": "evt_lookalike"}}}
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, after); err != nil {
		t.Fatal(err)
	}
	waitHandled(t, s, 2)
	fx := b.effects(t)["warehouse"]
	if len(fx) != 2 || fx["evt_after"] != 1 || fx["evt_lookalike"] != 1 {
		t.Errorf("effects %v; want one each of evt_after and evt_lookalike", fx)
	}
	var body string
	if err := b.pool.QueryRow(t.Context(), `SELECT body FROM `+b.schema+`.fx WHERE event_id = 'evt_lookalike'`).Scan(&body); err != nil || body != lookalike {
		t.Errorf("evt_lookalike's handler saw %q (%v); want the body as sent, %q", body, err, lookalike)
	}
	if f := s.met.failed.Load(); f != int64(3*len(msgs)) {
		t.Errorf("failed %d times, want %d (%d messages, maxReceiveCount 3)", f, 3*len(msgs), len(msgs))
	}
	for _, want := range []string{
		refused.Pointer.String() + ": the bucket is not among the reader's allowed buckets",
		missing.String() + ": no such object",
		"malformed pointer: the body is not a JSON array",
		"the payload is over the reader's bound (ReaderConfig.MaxPayload): the message says 102400 bytes; the bound is 65536",
		"the object's size differs from the message's size attribute: the object is 10240 bytes, the attribute says 1000",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the worker's log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestOffloadedWithoutFetcher (fauxqs; GoAws lacks S3): a worker without Config.Payloads refuses
// a message that points to an offloaded payload (its body is not the payload), which goes to the
// DLQ; an ordinary message after it is applied.
func TestOffloadedWithoutFetcher(t *testing.T) {
	t.Parallel()
	k := offloadSetup(t, 0)
	b := fxSetup(t)
	s := &subscriber{name: "warehouse", q: srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "offload-none", MaxReceiveCount: 3}), met: &counters{}}
	m := k.offloaded(t, "evt_big", bigOrderPaid("evt_big", 300<<10), true)
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, []sqstest.Message{m, orderPaid("evt_small")}); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	b.start(t, s, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sqstest.WaitCount(t, srv.Client(), s.q.DLQURL, 1, 60*time.Second)
	waitHandled(t, s, 1)
	if fx := b.effects(t)["warehouse"]; len(fx) != 1 || fx["evt_small"] != 1 {
		t.Errorf("effects %v; want one, of evt_small", fx)
	}
	if !strings.Contains(logs.String(), "Config.Payloads is nil") {
		t.Errorf("the worker's log lacks the refusal:\n%s", logs.String())
	}
}

// TestOffloadFanOut (fauxqs; GoAws lacks S3): OrderPaid events published to an SNS topic, a
// fifth of them offloaded, fan out to three queues (enveloped, raw, and enveloped with
// SNSEnvelope): the size attribute arrives in the envelope's attributes or the message's own.
// Every subscriber reads the same objects and applies each event once; none deletes an object,
// so all are still there when every subscriber is done.
func TestOffloadFanOut(t *testing.T) {
	t.Parallel()
	k := offloadSetup(t, 0)
	b := snsSetup(t)
	subs := []*subscriber{b.subscribe(t, "warehouse", false), b.subscribe(t, "loyalty", true), b.subscribe(t, "email", false)}
	subs[2].mode = worker.SNSEnvelope
	ids := eventIDs("fan", 40)
	var msgs []sqstest.Message
	var keys []string
	for i, id := range ids {
		if i%5 != 0 {
			msgs = append(msgs, orderPaid(id))
			continue
		}
		p := bigOrderPaid(id, 200<<10)
		msgs = append(msgs, k.offloaded(t, id, p, true))
		keys = append(keys, s3payload.ObjectKey(s3payload.DefaultPrefix, id, []byte(p)))
	}
	if err := sqstest.Publish(t.Context(), b.sns, b.topic.ARN, msgs); err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		s.payloads = k.r
		b.start(t, s, nil)
	}
	for _, s := range subs {
		waitHandled(t, s, len(ids))
	}
	b.checkEach(t, []string{"warehouse", "loyalty", "email"}, ids)
	var big int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.schema+`.fx WHERE length(body) > 200000`).Scan(&big); err != nil || big != 3*len(keys) {
		t.Errorf("%d effects saw a payload of over 200,000 bytes (%v); want %d (3 subscribers × %d offloaded)", big, err, 3*len(keys), len(keys))
	}
	for _, key := range keys {
		if _, err := k.s3.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(k.bucket), Key: aws.String(key)}); err != nil {
			t.Errorf("object %s is gone after every subscriber read it: %v", key, err)
		}
	}
}

// TestOffloadInterop (fauxqs; GoAws lacks S3): messages written by a third-party extended client
// (harness/extclient: an npm port of AWS's extended client, which writes the pointer and
// SQSLargePayloadSize, no event_id) are applied by our worker once each, keyed by the payload's
// id, the objects left in place. Ours are read by theirs when written with the legacy attribute
// name (WriterConfig.LegacyAttribute), the only one that client knows; with ExtendedPayloadSize
// alone it hands its handler the pointer, which is why the option exists.
func TestOffloadInterop(t *testing.T) {
	t.Parallel()
	k := offloadSetup(t, 0)
	b := fxSetup(t)
	s := &subscriber{name: "warehouse", q: srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "offload-interop", MaxReceiveCount: 3}),
		met: &counters{}, payloads: k.r}
	ids := eventIDs("ext", 3)
	var sent []extclient.Sent
	for _, id := range ids {
		out, err := extclient.Send(t.Context(), srv.Endpoint, s.q.URL, k.bucket, []byte(bigOrderPaid(id, 300<<10)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, out)
	}
	b.start(t, s, nil)
	waitHandled(t, s, len(ids))
	b.checkEach(t, []string{"warehouse"}, ids)
	for i, out := range sent {
		var got string
		if err := b.pool.QueryRow(t.Context(), `SELECT encode(sha256(convert_to(body, 'UTF8')), 'hex') FROM `+b.schema+`.fx WHERE event_id = $1`, ids[i]).Scan(&got); err != nil || got != out.SHA256 {
			t.Errorf("%s: the handler saw SHA-256 %s (%v); the library stored %s", ids[i], got, err, out.SHA256)
		}
		if _, err := k.s3.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(out.Bucket), Key: aws.String(out.Key)}); err != nil {
			t.Errorf("%s: the library's object is gone: %v", ids[i], err)
		}
	}

	theirs := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "offload-theirs"})
	legacy, err := s3payload.NewWriter(s3payload.WriterConfig{S3: k.s3, Bucket: k.bucket, LegacyAttribute: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		w        *s3payload.Writer
		resolved bool
	}{{legacy, true}, {k.w, false}} {
		payload := bigOrderPaid("evt_ours", 300<<10)
		o, err := tc.w.Put(t.Context(), "evt_ours", []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		m := sqstest.Message{Body: o.Body, Numbers: map[string]string{o.Attribute: o.Size}, Attributes: map[string]string{"event_id": "evt_ours"}}
		if err := sqstest.Send(t.Context(), srv.Client(), theirs.URL, []sqstest.Message{m}); err != nil {
			t.Fatal(err)
		}
		got, err := extclient.Receive(t.Context(), srv.Endpoint, theirs.URL, k.bucket)
		switch {
		case tc.resolved && (err != nil || !got.Resolved || got.SHA256 != sha(payload) || !got.ObjectExists):
			t.Errorf("%s: their reader: %v, resolved %v, SHA-256 %s (want %s), object kept %v", o.Attribute, err, got.Resolved, got.SHA256, sha(payload), got.ObjectExists)
		case !tc.resolved && (got.Resolved || got.RawBody != o.Body):
			t.Errorf("%s: their reader resolved %v, body %.80q; it knows only %s, so it hands over the pointer", o.Attribute, got.Resolved, got.RawBody, extclient.SizeAttribute)
		}
	}
}

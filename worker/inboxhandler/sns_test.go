package inboxhandler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// The SNS fan-out, end to end: a topic, queues subscribed to it (raw or enveloped), a worker per
// queue, and the inbox in PostgreSQL. They run on fauxqs, whose SNS delivers as the AWS
// documentation says (harness/sqstest's TestSNSQuirks); on GoAws they skip (its envelopes carry
// the attributes in the wrong shape), except where a test needs no topic.

// snsBundle is a test's topic and its inbox, with a table fx in which every handler records
// each effect: which handler, which event, the body it saw and whether it came in an envelope.
type snsBundle struct {
	*bundle
	sns   *sns.Client
	topic *sqstest.Topic
}

func snsSetup(t *testing.T) *snsBundle {
	t.Helper()
	srv.SkipWithoutSNS(t)
	b := fxSetup(t)
	c, err := srv.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b.sns, b.topic = c, srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "fanout"})
	return b
}

// fxSetup is snsSetup without the topic, on any server: the inbox and its fx table.
func fxSetup(t *testing.T) *snsBundle {
	t.Helper()
	b := setup(t, nil)
	if _, err := b.pool.Exec(t.Context(), `CREATE TABLE `+b.schema+`.fx (handler text NOT NULL, event_id text NOT NULL, body text NOT NULL, enveloped bool NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &snsBundle{bundle: b}
}

// apply is the one handler function of these tests, whatever the queue and its delivery.
func (b *snsBundle) apply(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	key, handler, _ := inbox.EventKey(ctx)
	_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.fx VALUES ($1, $2, $3, $4)`, handler, key, string(m.Body), m.SNS != nil)
	return err
}

// subscriber is one queue subscribed to the topic, and its worker's handler.
type subscriber struct {
	name string
	q    *sqstest.Queue
	raw  bool
	mode worker.SNSMode
	met  *counters
	// payloads is the worker's Config.Payloads (offload_test.go), or nil.
	payloads worker.PayloadFetcher
}

// subscribe makes a queue (with a DLQ, maxReceiveCount 3) subscribed to the topic for handler
// name, raw or enveloped.
func (b *snsBundle) subscribe(t *testing.T, name string, raw bool) *subscriber {
	t.Helper()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "sns-" + name, MaxReceiveCount: 3})
	srv.Subscribe(t, b.topic, q, sqstest.SubscribeOptions{Raw: raw})
	return &subscriber{name: name, q: q, raw: raw, met: &counters{}}
}

// start runs a worker for s with the handler name s.name, and returns it.
func (b *snsBundle) start(t *testing.T, s *subscriber, log *slog.Logger) *worker.Worker {
	t.Helper()
	h, err := inboxhandler.New(b.ib, s.name, nil, b.apply)
	if err != nil {
		t.Fatal(err)
	}
	return workertest.Start(t, srv.Client(), &worker.Config{QueueURL: s.q.URL, Handler: h, SNS: s.mode, Payloads: s.payloads,
		WaitTime: time.Second, Backoff: func(int) time.Duration { return 0 }, Metrics: s.met, Logger: log})
}

// orderPaid is an OrderPaid event published with its event_id attribute.
func orderPaid(id string) sqstest.Message {
	return sqstest.Message{Body: fmt.Sprintf(`{"id":%q,"type":"OrderPaid","order_id":"ord-%s"}`, id, id),
		Attributes: map[string]string{"event_id": id}}
}

// publish publishes events, each once, and then dups of them a second time.
func (b *snsBundle) publish(t *testing.T, ids []string, dups int) {
	t.Helper()
	var msgs []sqstest.Message
	for _, id := range ids {
		msgs = append(msgs, orderPaid(id))
	}
	for _, id := range ids[:dups] {
		msgs = append(msgs, orderPaid(id))
	}
	if err := sqstest.Publish(t.Context(), b.sns, b.topic.ARN, msgs); err != nil {
		t.Fatal(err)
	}
}

// waitHandled waits until s's worker has handled n messages (processed or duplicates) and its
// queue is empty.
func waitHandled(t *testing.T, s *subscriber, n int) {
	t.Helper()
	sqstest.WaitFor(t, 60*time.Second, s.name+" to handle its messages", func() (bool, string) {
		p, d := s.met.processed.Load(), s.met.duplicates.Load()
		left, err := sqstest.Count(context.Background(), srv.Client(), s.q.URL)
		if err != nil {
			return false, err.Error()
		}
		return int(p+d) >= n && left == 0, fmt.Sprintf("processed %d, duplicates %d, %d left in the queue", p, d, left)
	})
}

// effects returns handler -> event -> effects in fx.
func (b *snsBundle) effects(t *testing.T) map[string]map[string]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT handler, event_id, count(*) FROM `+b.schema+`.fx GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for rows.Next() {
		var h, e string
		var n int
		if err := rows.Scan(&h, &e, &n); err != nil {
			t.Fatal(err)
		}
		if out[h] == nil {
			out[h] = map[string]int{}
		}
		out[h][e] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEach fails unless each of handlers applied each of ids exactly once, with an inbox row of
// its own for each, and applied nothing else.
func (b *snsBundle) checkEach(t *testing.T, handlers []string, ids []string) {
	t.Helper()
	fx := b.effects(t)
	for _, h := range handlers {
		bad := 0
		for _, id := range ids {
			if n := fx[h][id]; n != 1 {
				if bad++; bad <= 3 {
					t.Errorf("handler %s: event %s has %d effects, want 1", h, id, n)
				}
			}
		}
		if len(fx[h]) != len(ids) {
			t.Errorf("handler %s: effects for %d events, want %d", h, len(fx[h]), len(ids))
		}
		if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages WHERE handler = $1`, h); n != len(ids) {
			t.Errorf("handler %s: %d inbox rows, want %d", h, n, len(ids))
		}
	}
	if len(fx) != len(handlers) {
		t.Errorf("effects by %d handlers, want %d", len(fx), len(handlers))
	}
}

func eventIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%03d_%s", prefix, i, randHex(3))
	}
	return ids
}

// TestSNSRawAndEnveloped (the pass's SQS server): one topic, one queue subscribed with raw message
// delivery and one without. The same handler function applies each event once on both, sees the
// same body on both, and Message.SNS only on the enveloped one.
func TestSNSRawAndEnveloped(t *testing.T) {
	t.Parallel()
	b := snsSetup(t)
	env, raw := b.subscribe(t, "enveloped", false), b.subscribe(t, "raw", true)
	ids := eventIDs("evt", 50)
	b.publish(t, ids, 10)
	for _, s := range []*subscriber{env, raw} {
		b.start(t, s, nil)
	}
	for _, s := range []*subscriber{env, raw} {
		waitHandled(t, s, 60)
	}
	b.checkEach(t, []string{"enveloped", "raw"}, ids)
	var differ, envelopedRows, rawRows int
	err := b.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM `+b.schema+`.fx e JOIN `+b.schema+`.fx r USING (event_id)
		  WHERE e.handler = 'enveloped' AND r.handler = 'raw' AND e.body <> r.body),
		(SELECT count(*) FROM `+b.schema+`.fx WHERE handler = 'enveloped' AND enveloped),
		(SELECT count(*) FROM `+b.schema+`.fx WHERE handler = 'raw' AND enveloped)`).Scan(&differ, &envelopedRows, &rawRows)
	if err != nil {
		t.Fatal(err)
	}
	if differ != 0 || envelopedRows != len(ids) || rawRows != 0 {
		t.Errorf("%d events with different bodies on the two queues (want 0); Message.SNS set on %d enveloped (want %d) and %d raw (want 0)",
			differ, envelopedRows, len(ids), rawRows)
	}
	for _, s := range []*subscriber{env, raw} {
		if p, d, f := s.met.processed.Load(), s.met.duplicates.Load(), s.met.failed.Load(); p != 50 || d != 10 || f != 0 {
			t.Errorf("%s: processed %d, duplicates %d, failed %d; want 50, 10, 0", s.name, p, d, f)
		}
	}
}

// TestSNSFanOutThreeQueues (the pass's SQS server): each OrderPaid is published once to the topic, a
// fifth of them twice with the same event id; warehouse, loyalty and email (each its own queue,
// enveloped, raw, and enveloped with SNSEnvelope) apply every event exactly once, each with its
// own inbox rows.
func TestSNSFanOutThreeQueues(t *testing.T) {
	t.Parallel()
	b := snsSetup(t)
	subs := []*subscriber{b.subscribe(t, "warehouse", false), b.subscribe(t, "loyalty", true), b.subscribe(t, "email", false)}
	subs[2].mode = worker.SNSEnvelope
	ids := eventIDs("paid", 100)
	b.publish(t, ids, 20)
	for _, s := range subs {
		b.start(t, s, nil)
	}
	for _, s := range subs {
		waitHandled(t, s, 120)
	}
	b.checkEach(t, []string{"warehouse", "loyalty", "email"}, ids)
	for _, s := range subs {
		if p, d := s.met.processed.Load(), s.met.duplicates.Load(); p != 100 || d != 20 {
			t.Errorf("%s: processed %d, duplicates %d; want 100 and 20", s.name, p, d)
		}
	}
}

// TestSNSEnvelopeKeys (the pass's SQS server): a message published without the event_id attribute is keyed
// by its body's id, as a raw message is; one with neither is retried and dead-lettered (still
// the envelope, as it arrived), never processed.
func TestSNSEnvelopeKeys(t *testing.T) {
	t.Parallel()
	b := snsSetup(t)
	s := b.subscribe(t, "warehouse", false)
	if err := sqstest.Publish(t.Context(), b.sns, b.topic.ARN, []sqstest.Message{
		{Body: `{"id":"body-key-1","type":"OrderPaid"}`},
		{Body: `{"type":"OrderPaid","order_id":"no-key"}`},
		{Body: `{"id":"body-key-1","type":"OrderPaid"}`},
	}); err != nil {
		t.Fatal(err)
	}
	b.start(t, s, nil)
	sqstest.WaitCount(t, srv.Client(), s.q.DLQURL, 1, 60*time.Second)
	waitHandled(t, s, 2)
	fx := b.effects(t)
	if len(fx) != 1 || len(fx["warehouse"]) != 1 || fx["warehouse"]["body-key-1"] != 1 {
		t.Errorf("effects %v, want one, of body-key-1", fx)
	}
	if f := s.met.failed.Load(); f != 3 {
		t.Errorf("failed %d times, want 3 (the keyless message, maxReceiveCount 3)", f)
	}
	m := receiveOne(t, s.q.DLQURL)
	var env struct{ Type, TopicArn, Message string }
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil || env.Type != "Notification" ||
		env.TopicArn != b.topic.ARN || !strings.Contains(env.Message, `"no-key"`) {
		t.Errorf("the DLQ holds %q, want the keyless message's envelope", aws.ToString(m.Body))
	}
}

// TestSNSMalformedEnvelopes (the pass's SQS server): bodies sent straight to a queue that claim to be SNS
// envelopes and are not usable ones (Message not a string; Type SubscriptionConfirmation) are
// refused before the handler with an error that says so, retried and dead-lettered; the worker
// keeps running and applies a good notification sent after them.
func TestSNSMalformedEnvelopes(t *testing.T) {
	t.Parallel()
	b := snsSetup(t)
	s := b.subscribe(t, "warehouse", false)
	bad := []string{
		`{"Type":"Notification","MessageId":"m-1","TopicArn":"` + b.topic.ARN + `","Message":{"id":"evt_obj"},"Timestamp":"2026-01-01T00:00:00.000Z"}`,
		`{"Type":"SubscriptionConfirmation","MessageId":"m-2","Token":"t","TopicArn":"` + b.topic.ARN + `","Message":"You have chosen to subscribe","SubscribeURL":"https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription","Timestamp":"2026-01-01T00:00:00.000Z"}`,
	}
	var msgs []sqstest.Message
	for _, body := range bad {
		msgs = append(msgs, sqstest.Message{Body: body})
	}
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	b.start(t, s, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sqstest.WaitCount(t, srv.Client(), s.q.DLQURL, 2, 60*time.Second)
	if err := sqstest.SendEnvelope(t.Context(), srv.Client(), s.q.URL, b.topic.ARN, `{"id":"evt_after"}`, nil); err != nil {
		t.Fatal(err)
	}
	waitHandled(t, s, 1)
	if fx := b.effects(t); len(fx["warehouse"]) != 1 || fx["warehouse"]["evt_after"] != 1 {
		t.Errorf("effects %v, want one, of evt_after", fx)
	}
	if f := s.met.failed.Load(); f != 6 {
		t.Errorf("failed %d times, want 6 (2 messages, maxReceiveCount 3)", f)
	}
	for _, want := range []string{
		`malformed SNS envelope: \"Message\" is not a string`,
		`SNS envelope is not a Notification: Type \"SubscriptionConfirmation\" from topic ` + b.topic.ARN,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the worker's log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestSNSLookalikeBodyKeepsItsKey (GoAws, fauxqs): a raw SQS message whose event_id attribute
// is evt_real and whose body is shaped like an SNS envelope naming evt_victim (in its
// MessageAttributes and its Message's id), as a producer that relays user-supplied content may
// be made to send, is processed under evt_real with its body as sent. The genuine evt_victim,
// delivered after it as SNS delivers it (published to a topic the queue subscribes to without
// raw delivery where the server's SNS is usable, else that envelope sent to the queue), is
// applied, not deleted as a duplicate.
func TestSNSLookalikeBodyKeepsItsKey(t *testing.T) {
	t.Parallel()
	b := fxSetup(t)
	s := &subscriber{name: "warehouse", q: srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "sns-lookalike", MaxReceiveCount: 3}), met: &counters{}}
	topicARN := "arn:aws:sns:us-east-1:000000000000:orders"
	snsOK, _ := srv.SNSSupported()
	if snsOK {
		c, err := srv.SNSClient(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.sns, b.topic = c, srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "lookalike"})
		srv.Subscribe(t, b.topic, s.q, sqstest.SubscribeOptions{})
		topicARN = b.topic.ARN
	}
	lookalike, err := json.Marshal(map[string]any{
		"Type": "Notification", "MessageId": "5b2c7e1e-0000-4000-8000-00000000dead", "TopicArn": topicARN,
		"Message":           `{"id":"evt_victim","type":"OrderPaid","order_id":"ord-forged"}`,
		"Timestamp":         "2026-01-01T00:00:00.000Z",
		"MessageAttributes": map[string]any{"event_id": map[string]string{"Type": "String", "Value": "evt_victim"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqstest.Send(t.Context(), srv.Client(), s.q.URL, []sqstest.Message{
		{Body: string(lookalike), Attributes: map[string]string{"event_id": "evt_real"}},
	}); err != nil {
		t.Fatal(err)
	}
	b.start(t, s, nil)
	waitHandled(t, s, 1)
	if fx := b.effects(t); len(fx) != 1 || len(fx["warehouse"]) != 1 || fx["warehouse"]["evt_real"] != 1 {
		t.Errorf("effects %v after the lookalike, want one, of evt_real", fx)
	}

	genuine := orderPaid("evt_victim")
	if snsOK {
		err = sqstest.Publish(t.Context(), b.sns, topicARN, []sqstest.Message{genuine})
	} else {
		err = sqstest.SendEnvelope(t.Context(), srv.Client(), s.q.URL, topicARN, genuine.Body, genuine.Attributes)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitHandled(t, s, 2)
	rows, err := b.pool.Query(t.Context(), `SELECT event_id, body, enveloped FROM `+b.schema+`.fx ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	type effect struct {
		key, body string
		enveloped bool
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (effect, error) {
		var e effect
		return e, r.Scan(&e.key, &e.body, &e.enveloped)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []effect{{"evt_real", string(lookalike), false}, {"evt_victim", genuine.Body, true}}
	if !slices.Equal(got, want) {
		t.Errorf("effects %+v,\nwant %+v", got, want)
	}
	if p, d, f := s.met.processed.Load(), s.met.duplicates.Load(), s.met.failed.Load(); p != 2 || d != 0 || f != 0 {
		t.Errorf("processed %d, duplicates %d, failed %d; want 2, 0, 0", p, d, f)
	}
}

func receiveOne(t *testing.T, url string) *types.Message {
	t.Helper()
	out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("%s: %d messages, want 1", url, len(out.Messages))
	}
	return &out.Messages[0]
}

// lockedBuffer is a bytes.Buffer that the worker's goroutines may write to while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

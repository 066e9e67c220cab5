package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

const waitLong = 60 * time.Second

// startRelay starts a relay on the bundle's schema, stopped when the test ends.
func (b *bundle) startRelay(t testing.TB, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = b.schema
	if cfg.SQS == nil {
		cfg.SQS = srv.Client()
	}
	cfg.PollInterval = cmpOr(cfg.PollInterval, 200*time.Millisecond)
	cfg.BackoffMin = cmpOr(cfg.BackoffMin, 20*time.Millisecond)
	cfg.BackoffMax = cmpOr(cfg.BackoffMax, 100*time.Millisecond)
	rl, err := outbox.NewRelay(b.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if err := rl.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return rl
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// add commits msgs in one transaction and returns their event ids.
func (b *bundle) add(t testing.TB, msgs ...outbox.Message) []string {
	t.Helper()
	var ids []string
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		for _, m := range msgs {
			id, err := b.ob.Add(t.Context(), tx, m)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// receive takes n messages off the queue (deleting each), or fails the test at the deadline.
func receive(t testing.TB, url string, n int) []sqstypes.Message {
	t.Helper()
	var got []sqstypes.Message
	c := srv.Client()
	sqstest.WaitFor(t, waitLong, fmt.Sprintf("%d messages", n), func() (bool, string) {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}}, worker.PlainRequestBodies)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}, worker.PlainRequestBodies); err != nil {
				return false, err.Error()
			}
		}
		return len(got) >= n, fmt.Sprintf("%d received", len(got))
	})
	return got
}

// receiveDistinct takes n messages off the queue, and fails the test unless their bodies are
// n different ones.
func receiveDistinct(t testing.TB, url string, n int) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range receive(t, url, n) {
		seen[aws.ToString(m.Body)] = true
	}
	if len(seen) != n {
		t.Fatalf("received %d distinct of %d", len(seen), n)
	}
}

// empty checks that the queue holds nothing more.
func empty(t testing.TB, url string) {
	t.Helper()
	n, err := sqstest.Count(t.Context(), srv.Client(), url)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d more messages in the queue; want none", n)
	}
}

// waitStats waits until ok holds: a relay counts a mark once its round has committed, which
// may be after a test sees the message or the row.
func waitStats(t *testing.T, what string, ok func() bool, relays ...*outbox.Relay) {
	t.Helper()
	sqstest.WaitFor(t, waitLong, "relay stats: "+what, func() (bool, string) {
		var got []string
		for _, rl := range relays {
			got = append(got, fmt.Sprintf("%+v", rl.Stats()))
		}
		return ok(), strings.Join(got, ", ")
	})
}

func eventID(m sqstypes.Message) string {
	return aws.ToString(m.MessageAttributes["event_id"].StringValue)
}

// faulty wraps the real client and fails the entries whose body a test names: a fake for the
// fault only. It records each body it was asked to send.
type faulty struct {
	next outbox.SQSClient
	mu   sync.Mutex
	fail map[string]int // body -> failures left (-1: always)
	sent map[string]int
}

func newFaulty(fail map[string]int) *faulty {
	return &faulty{next: srv.Client(), fail: fail, sent: map[string]int{}}
}

func (f *faulty) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	pass := *in
	pass.Entries = nil
	var failed []sqstypes.BatchResultErrorEntry
	for _, e := range in.Entries {
		body := aws.ToString(e.MessageBody)
		f.sent[body]++
		if left := f.fail[body]; left != 0 {
			f.fail[body] = left - 1
			failed = append(failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InjectedFault"), Message: aws.String("injected for " + body)})
			continue
		}
		pass.Entries = append(pass.Entries, e)
	}
	f.mu.Unlock()
	out := &sqs.SendMessageBatchOutput{}
	if len(pass.Entries) > 0 {
		var err error
		if out, err = f.next.SendMessageBatch(ctx, &pass, optFns...); err != nil {
			return nil, err
		}
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func (f *faulty) sends(body string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[body]
}

// TestCommittedEventsReachTheQueue checks that a committed event arrives with its event_id
// attribute, and that a transaction that rolled back publishes nothing.
func TestCommittedEventsReachTheQueue(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	rl := b.startRelay(t, outbox.RelayConfig{PollInterval: time.Hour}) // NOTIFY only
	ctx := t.Context()

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: q.URL, Body: "rolled back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	ids := b.add(t, outbox.Message{Destination: q.URL, Body: "committed", Attributes: map[string]outbox.Attribute{
		"kind": outbox.StringAttribute("OrderPaid"), "n": outbox.NumberAttribute("3"), "bin": outbox.BinaryAttribute([]byte{1, 2})}})
	got := receive(t, q.URL, 1)
	if body := aws.ToString(got[0].Body); body != "committed" || eventID(got[0]) != ids[0] {
		t.Fatalf("got %q with event_id %q; want the committed one, %q", body, eventID(got[0]), ids[0])
	}
	if a := got[0].MessageAttributes; aws.ToString(a["kind"].StringValue) != "OrderPaid" || aws.ToString(a["n"].StringValue) != "3" || string(a["bin"].BinaryValue) != "\x01\x02" {
		t.Fatalf("attributes %v", a)
	}
	sqstest.WaitFor(t, waitLong, "the row marked sent", func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM "+b.schema+".outbox_messages WHERE sent_at IS NOT NULL")
		return n == 1, strconv.Itoa(n)
	})
	if n := b.count(t, "SELECT count(*) FROM "+b.schema+".outbox_messages"); n != 1 {
		t.Fatalf("%d rows; want 1 (the rolled-back one never existed)", n)
	}
	empty(t, q.URL)
	waitStats(t, "1 published", func() bool { return rl.Stats().Published == 1 }, rl)
}

// TestLostNotifyCaughtByPolling checks both ways a NOTIFY is missed: events committed before
// the relay started, and an event whose notification never came (the trigger disabled).
func TestLostNotifyCaughtByPolling(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	before := b.add(t, outbox.Message{Destination: q.URL, Body: "before start"})
	b.startRelay(t, outbox.RelayConfig{PollInterval: 300 * time.Millisecond})
	if got := receive(t, q.URL, 1); eventID(got[0]) != before[0] {
		t.Fatalf("got %q; want %q", eventID(got[0]), before[0])
	}
	if _, err := b.pool.Exec(t.Context(), "ALTER TABLE "+b.schema+".outbox_messages DISABLE TRIGGER outbox_messages_notify"); err != nil {
		t.Fatal(err)
	}
	silent := b.add(t, outbox.Message{Destination: q.URL, Body: "no notify"})
	if got := receive(t, q.URL, 1); eventID(got[0]) != silent[0] {
		t.Fatalf("got %q; want %q", eventID(got[0]), silent[0])
	}
	empty(t, q.URL)
}

// TestPartialBatchRetriesOnlyFailed checks that of a batch with two failed entries, only those
// two are sent again, and every message arrives once.
func TestPartialBatchRetriesOnlyFailed(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	f := newFaulty(map[string]int{"m3": 1, "m7": 1})
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, outbox.Message{Destination: q.URL, Body: "m" + strconv.Itoa(i)})
	}
	b.add(t, msgs...)
	rl := b.startRelay(t, outbox.RelayConfig{SQS: f, Senders: 1})
	receiveDistinct(t, q.URL, 10)
	for i := range 10 {
		body, want := "m"+strconv.Itoa(i), 1
		if i == 3 || i == 7 {
			want = 2
		}
		if n := f.sends(body); n != want {
			t.Errorf("%s sent %d times; want %d", body, n, want)
		}
	}
	empty(t, q.URL)
	waitStats(t, "10 published, 2 failures", func() bool { s := rl.Stats(); return s.Published == 10 && s.Failures == 2 }, rl)
}

// TestParkAfterMaxAttempts checks that a message that keeps failing is parked with its error,
// not dropped, that the others go, and that RetryParked puts it back.
func TestParkAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	f := newFaulty(map[string]int{"poison": 3})
	ids := b.add(t, outbox.Message{Destination: q.URL, Body: "poison"}, outbox.Message{Destination: q.URL, Body: "fine"})
	rl := b.startRelay(t, outbox.RelayConfig{SQS: f, MaxAttempts: 3})
	if got := receive(t, q.URL, 1); aws.ToString(got[0].Body) != "fine" {
		t.Fatalf("got %q", aws.ToString(got[0].Body))
	}
	sqstest.WaitFor(t, waitLong, "the poison message parked", func() (bool, string) {
		s, err := b.ob.Stats(t.Context())
		return err == nil && s.Parked == 1, fmt.Sprintf("%+v %v", s, err)
	})
	var attempts int
	var lastErr string
	if err := b.pool.QueryRow(t.Context(), "SELECT attempts, last_error FROM "+b.schema+".outbox_messages WHERE event_id = $1", ids[0]).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || !strings.Contains(lastErr, "InjectedFault") || f.sends("poison") != 3 {
		t.Fatalf("attempts %d, sends %d, last error %q; want 3, 3 and the injected fault", attempts, f.sends("poison"), lastErr)
	}
	waitStats(t, "1 parked", func() bool { return rl.Stats().Parked == 1 }, rl)
	// The fault is used up; the operator re-queues it and it goes.
	if n, err := b.ob.RetryParked(t.Context()); err != nil || n != 1 {
		t.Fatalf("RetryParked = %d, %v", n, err)
	}
	if got := receive(t, q.URL, 1); eventID(got[0]) != ids[0] {
		t.Fatalf("got %q; want %q", eventID(got[0]), ids[0])
	}
}

// TestFIFOOrderWithFailingEntry checks that per group order holds when a group's entry fails
// twice: nothing later in its group passes it, and the other groups go on.
func TestFIFOOrderWithFailingEntry(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox", FIFO: true})
	f := newFaulty(map[string]int{"g1-2": 2, "g2-0": 1})
	var msgs []outbox.Message
	for i := range 6 {
		for g := range 3 {
			msgs = append(msgs, outbox.Message{Destination: q.URL, GroupID: "g" + strconv.Itoa(g), Body: fmt.Sprintf("g%d-%d", g, i)})
		}
	}
	b.add(t, msgs...)
	b.startRelay(t, outbox.RelayConfig{SQS: f, Senders: 3})
	got := receive(t, q.URL, len(msgs))
	order := map[string][]string{}
	for _, m := range got {
		g := m.Attributes["MessageGroupId"]
		order[g] = append(order[g], aws.ToString(m.Body))
	}
	for g := range 3 {
		var want []string
		for i := range 6 {
			want = append(want, fmt.Sprintf("g%d-%d", g, i))
		}
		if gid := "g" + strconv.Itoa(g); !slices.Equal(order[gid], want) {
			t.Errorf("group %s arrived as %v; want %v", gid, order[gid], want)
		}
	}
	if f.sends("g1-2") != 3 || f.sends("g1-3") != 1 {
		t.Fatalf("g1-2 sent %d times, g1-3 %d; want 3 and 1", f.sends("g1-2"), f.sends("g1-3"))
	}
	empty(t, q.URL)
}

// TestTwoRelaysPublishOnce checks that two relays side by side publish each event once.
func TestTwoRelaysPublishOnce(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	r1 := b.startRelay(t, outbox.RelayConfig{Senders: 2})
	r2 := b.startRelay(t, outbox.RelayConfig{Senders: 2})
	const n = 200
	want := map[string]bool{}
	for i := range n / 20 {
		var msgs []outbox.Message
		for j := range 20 {
			msgs = append(msgs, outbox.Message{Destination: q.URL, Body: fmt.Sprintf("e%d-%d", i, j)})
		}
		for _, id := range b.add(t, msgs...) {
			want[id] = true
		}
	}
	got := receive(t, q.URL, n)
	seen := map[string]int{}
	for _, m := range got {
		seen[eventID(m)]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s arrived %d times", id, seen[id])
		}
	}
	empty(t, q.URL)
	waitStats(t, fmt.Sprintf("%d published by both", n), func() bool { return r1.Stats().Published+r2.Stats().Published == n }, r1, r2)
	s1, s2 := r1.Stats(), r2.Stats()
	t.Logf("relay 1 published %d, relay 2 %d", s1.Published, s2.Published)
}

// TestSNSTopic checks that an event for a topic reaches a queue subscribed with raw delivery,
// with its event_id attribute.
func TestSNSTopic(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	srv.SkipWithoutSNS(t)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-sns"})
	tp := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "outbox"})
	srv.Subscribe(t, tp, q, sqstest.SubscribeOptions{Raw: true})
	sc, err := srv.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := b.add(t, outbox.Message{Destination: tp.ARN, Body: `{"type":"OrderPaid"}`})
	b.startRelay(t, outbox.RelayConfig{SNS: sc})
	got := receive(t, q.URL, 1)
	if aws.ToString(got[0].Body) != `{"type":"OrderPaid"}` || eventID(got[0]) != ids[0] {
		t.Fatalf("got %q, event_id %q; want event %q", aws.ToString(got[0].Body), eventID(got[0]), ids[0])
	}
}

// TestPurgeDeletesOnlyOldSentRows checks the purge's horizon.
func TestPurgeDeletesOnlyOldSentRows(t *testing.T) {
	t.Parallel()
	b := setup(t, &outbox.Config{Retention: time.Hour})
	b.add(t, outbox.Message{Destination: queueURL, Body: "old", EventID: "old"},
		outbox.Message{Destination: queueURL, Body: "new", EventID: "new"},
		outbox.Message{Destination: queueURL, Body: "unsent", EventID: "unsent"})
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+b.schema+".outbox_messages SET sent_at = CASE event_id WHEN 'old' THEN now() - interval '2 hours' WHEN 'new' THEN now() END"); err != nil {
		t.Fatal(err)
	}
	r, err := b.ob.Purge(t.Context())
	if err != nil || r.Deleted != 1 {
		t.Fatalf("Purge = %+v, %v; want 1 deleted", r, err)
	}
	if n := b.count(t, "SELECT count(*) FROM "+b.schema+".outbox_messages WHERE event_id IN ('new', 'unsent')"); n != 2 {
		t.Fatalf("%d of the young and unsent rows left; want 2", n)
	}
}

// blocking passes its first call to the real client and holds every later one until its
// context ends; entered receives a value as each held call begins.
type blocking struct {
	next    outbox.SQSClient
	mu      sync.Mutex
	calls   int
	entered chan struct{}
}

func (c *blocking) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.mu.Lock()
	c.calls++
	first := c.calls == 1
	c.mu.Unlock()
	if first {
		return c.next.SendMessageBatch(ctx, in, optFns...)
	}
	c.entered <- struct{}{}
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// TestStopAndCancel checks that StopAndCancel cancels a publish in flight (one that would
// otherwise hold Stop for the ten-minute publish timeout), marks sent the batch that was
// published, and releases the rest with no attempt counted, so that another relay publishes
// them at once rather than after the twenty-minute lease.
func TestStopAndCancel(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox"})
	var msgs []outbox.Message
	for i := range 30 {
		msgs = append(msgs, outbox.Message{Destination: q.URL, Body: "m" + strconv.Itoa(i)})
	}
	b.add(t, msgs...)
	c := &blocking{next: srv.Client(), entered: make(chan struct{}, 10)}
	rl, err := outbox.NewRelay(b.pool, &outbox.RelayConfig{Schema: b.schema, SQS: c, Senders: 1, ClaimSize: 30,
		PublishTimeout: 10 * time.Minute, Lease: 20 * time.Minute, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.entered:
	case <-time.After(waitLong):
		t.Fatal("the relay never made its second publish")
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if err := rl.StopAndCancel(ctx); err != nil {
		t.Fatalf("StopAndCancel: %v", err)
	}
	if s := rl.Stats(); s.Published != 10 || s.Failures != 0 {
		t.Fatalf("relay stats %+v; want the first batch of 10 published and no failure", s)
	}
	tb := b.schema + ".outbox_messages"
	if n := b.count(t, "SELECT count(*) FROM "+tb+" WHERE sent_at IS NOT NULL"); n != 10 {
		t.Fatalf("%d rows marked sent; want 10", n)
	}
	if n := b.count(t, "SELECT count(*) FROM "+tb+" WHERE sent_at IS NULL AND claimed_until IS NULL AND lease_token IS NULL AND attempts = 0"); n != 20 {
		t.Fatalf("%d unsent rows released with no attempt counted; want 20", n)
	}
	b.startRelay(t, outbox.RelayConfig{Lease: 20 * time.Minute})
	receiveDistinct(t, q.URL, 30)
	empty(t, q.URL)
}

// TestFIFOGroupMovesWithoutPolling: the rows of one FIFO group are published one after the
// other without waiting for the poll: each head's mark rides with the claim of the next row.
// With PollInterval an hour, a relay that waited for the poll between two rows of a group stops
// after the first (it did: one FIFO group moved one row per PollInterval). fauxqs.
func TestFIFOGroupMovesWithoutPolling(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox", FIFO: true})
	rl := b.startRelay(t, outbox.RelayConfig{PollInterval: time.Hour})
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{Destination: q.URL, GroupID: "g", Body: fmt.Sprint("m", i)})
	}
	b.add(t, msgs...) // one transaction: one NOTIFY wakes the relay
	sqstest.WaitFor(t, waitLong, "the group's 20 rows published", func() (bool, string) {
		return rl.Stats().Published == 20, fmt.Sprint(rl.Stats().Published, " published")
	})
	var order []string
	for _, m := range receive(t, q.URL, 20) {
		order = append(order, aws.ToString(m.Body))
	}
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprint("m", i))
	}
	if !slices.Equal(order, want) {
		t.Fatalf("arrived as %v; want %v", order, want)
	}
}

// recording wraps the real SQS client and keeps every SendMessageBatch request: what the relay
// asked for, which a server that drops a field on receive cannot show.
type recording struct {
	next outbox.SQSClient
	mu   sync.Mutex
	reqs []*sqs.SendMessageBatchInput
}

func (r *recording) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, in)
	r.mu.Unlock()
	return r.next.SendMessageBatch(ctx, in, optFns...)
}

// TestFairQueueGroupIDs (GoAws or fauxqs; the request recorded, since neither returns a standard
// queue's MessageGroupId): rows with group ids for a standard queue (a fair queue) are sent with
// their MessageGroupId, without a deduplication id, and with no FIFO head of line: two rows of
// one group committed together go in one batch. They are delivered, and where the server keeps
// the group id (sqstest.FairGroups: AWS) it comes back.
func TestFairQueueGroupIDs(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-fair"})
	rec := &recording{next: srv.Client()}
	b.add(t, outbox.Message{Destination: q.URL, Body: "a-1", GroupID: "tenant-a"},
		outbox.Message{Destination: q.URL, Body: "a-2", GroupID: "tenant-a"},
		outbox.Message{Destination: q.URL, Body: "b-1", GroupID: "tenant-b"})
	b.startRelay(t, outbox.RelayConfig{SQS: rec})
	got := receive(t, q.URL, 3)
	groups := map[string]string{}
	for _, m := range got {
		groups[aws.ToString(m.Body)] = m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
	}
	if srv.Lacks(sqstest.FairGroups) == "" && (groups["a-1"] != "tenant-a" || groups["a-2"] != "tenant-a" || groups["b-1"] != "tenant-b") {
		t.Errorf("received group ids %v", groups)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	sent := map[string]string{}
	together := false
	for _, in := range rec.reqs {
		ofA := 0
		for _, e := range in.Entries {
			sent[aws.ToString(e.MessageBody)] = aws.ToString(e.MessageGroupId)
			if e.MessageDeduplicationId != nil {
				t.Errorf("%s sent with MessageDeduplicationId %q; a standard queue refuses one", aws.ToString(e.MessageBody), aws.ToString(e.MessageDeduplicationId))
			}
			if aws.ToString(e.MessageGroupId) == "tenant-a" {
				ofA++
			}
		}
		together = together || ofA == 2
	}
	if sent["a-1"] != "tenant-a" || sent["a-2"] != "tenant-a" || sent["b-1"] != "tenant-b" {
		t.Errorf("sent group ids %v; want each row's", sent)
	}
	if !together {
		t.Errorf("tenant-a's two rows went in separate batches (%d requests): a FIFO head of line on a standard queue", len(rec.reqs))
	}
}

// TestSNSStandardTopicGroupID (the server's SNS): an event with a group id for a standard topic
// (SNS passes it on to standard-queue subscriptions, for fair queues) is published and reaches a
// subscribed queue.
func TestSNSStandardTopicGroupID(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	srv.SkipWithoutSNS(t)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "outbox-sns-fair"})
	tp := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "outbox-fair"})
	srv.Subscribe(t, tp, q, sqstest.SubscribeOptions{Raw: true})
	sc, err := srv.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := b.add(t, outbox.Message{Destination: tp.ARN, Body: `{"type":"OrderPaid"}`, GroupID: "tenant-a"})
	b.startRelay(t, outbox.RelayConfig{SNS: sc})
	got := receive(t, q.URL, 1)
	if eventID(got[0]) != ids[0] {
		t.Fatalf("event_id %q; want %q", eventID(got[0]), ids[0])
	}
}

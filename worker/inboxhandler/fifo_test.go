package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// The tests in this file run FIFO queues through the real inbox. Each declares the features it
// needs (sqstest.FIFO, sqstest.ContentDedup): they run on fauxqs and on LocalStack or SQS, and
// skip on GoAws, whose FIFO queues are unreliable, saying why.
//
// fauxqs returns at most one message per group per receive, so a message held behind the running
// head of its group in one receive cannot be produced here: that stays on the fake
// (TestFIFOReleaseBehindFailure, TestFIFOHeldMessagesKeepTheirLease in ../).

// groupRecorder is the harness's SQS client with a record of FIFO group locking as the server
// shows it: a message of a group returned by a receive while another message of that group had
// been received and not yet deleted is a violation. It changes nothing: every call goes to the
// server. (A message made visible again by a retry or a release comes back with its own
// MessageId, which is allowed.)
type groupRecorder struct {
	*sqs.Client

	mu         sync.Mutex
	held       map[string]heldMessage // by group: the message received last and not deleted
	extensions map[string]int         // successful ChangeMessageVisibility calls per receipt handle
	violations []string
}

type heldMessage struct{ id, body, handle string }

func newGroupRecorder() *groupRecorder {
	return &groupRecorder{Client: srv.Client(), held: map[string]heldMessage{}, extensions: map[string]int{}}
}

func (r *groupRecorder) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := r.Client.ReceiveMessage(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range out.Messages {
		g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		got := heldMessage{id: aws.ToString(m.MessageId), body: aws.ToString(m.Body), handle: aws.ToString(m.ReceiptHandle)}
		if h, ok := r.held[g]; ok && h.id != got.id {
			r.violations = append(r.violations, fmt.Sprintf("group %s: %s delivered while %s was in flight", g, got.body, h.body))
		}
		r.held[g] = got
	}
	return out, nil
}

func (r *groupRecorder) deleted(handle string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for g, h := range r.held {
		if h.handle == handle {
			delete(r.held, g)
		}
	}
}

func (r *groupRecorder) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	r.deleted(aws.ToString(in.ReceiptHandle))
	return r.Client.DeleteMessage(ctx, in, optFns...)
}

func (r *groupRecorder) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	for _, e := range in.Entries {
		r.deleted(aws.ToString(e.ReceiptHandle))
	}
	return r.Client.DeleteMessageBatch(ctx, in, optFns...)
}

func (r *groupRecorder) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	out, err := r.Client.ChangeMessageVisibility(ctx, in, optFns...)
	if err == nil {
		r.mu.Lock()
		r.extensions[aws.ToString(in.ReceiptHandle)]++
		r.mu.Unlock()
	}
	return out, err
}

func (r *groupRecorder) extended(handle string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.extensions[handle]
}

func (r *groupRecorder) checkNoViolations(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Errorf("group lock broken: %s", v)
	}
}

// fifoEvents makes per events for each of groups groups: event ids "g<g>-e<i>-<random>", bodies
// {"id": ...}, each message with its group and a deduplication id of its own.
func fifoEvents(groups, per int) (ids map[string][]string, all []string, msgs []sqstest.Message) {
	ids = map[string][]string{}
	suffix := randHex(3)
	for i := range per {
		for g := range groups {
			gid := fmt.Sprintf("g%d", g)
			id := fmt.Sprintf("%s-e%d-%s", gid, i, suffix)
			ids[gid] = append(ids[gid], id)
			all = append(all, id)
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":%q}`, id), GroupID: gid, DedupID: id})
		}
	}
	return ids, all, msgs
}

// effectOrder returns, per group, the event ids of the effects in the order they were written.
// The group is the event id's first part.
func (b *bundle) effectOrder(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT event_id FROM `+b.schema+`.effects ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, id := range ids {
		g, _, _ := strings.Cut(id, "-")
		out[g] = append(out[g], id)
	}
	return out
}

// setupOrdered is setup with a sequence number on each effect, in the order of the writes.
func setupOrdered(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, nil)
	if _, err := b.pool.Exec(context.Background(), `ALTER TABLE `+b.schema+`.effects ADD COLUMN seq bigserial`); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFIFOInbox (the pass's SQS server) is TestFIFO through the real inbox: four groups of eight
// events on a FIFO queue; the fourth event of each group fails once (its effect rolls back with
// its claim) and is retried after a 1 s backoff. Each event has exactly one effect, the effects
// of each group are written in the order sent (the retried one before those after it), groups run
// in parallel, and the server never delivers a message of a group while another of that group is
// received and not deleted. It needs fauxqs: GoAws's FIFO queues are unreliable.
func TestFIFOInbox(t *testing.T) {
	srv.Need(t, sqstest.FIFO)
	t.Parallel()
	const groups, per = 4, 8
	b := setupOrdered(t)
	rec := newGroupRecorder()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "fifo-inbox", FIFO: true, MaxReceiveCount: 5})
	ids, all, msgs := fifoEvents(groups, per)
	if err := sqstest.Send(t.Context(), rec, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	failing := map[string]bool{}
	for g := range ids {
		failing[ids[g][3]] = true
	}
	h := b.handler(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		if err := b.effect(ctx, tx, m); err != nil {
			return err
		}
		if key, _, _ := inbox.EventKey(ctx); failing[key] && m.ReceiveCount == 1 {
			return errors.New("fails once, after writing its effect")
		}
		return nil
	})
	var mu sync.Mutex
	running := map[string]int{}
	parallel, maxPar := 0, 0
	met := &counters{}
	w := workertest.Start(t, rec, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
		Backoff: func(int) time.Duration { return time.Second },
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			mu.Lock()
			running[m.GroupID]++
			parallel++
			maxPar = max(maxPar, parallel)
			if running[m.GroupID] > 1 {
				t.Errorf("group %s has %d handlers running", m.GroupID, running[m.GroupID])
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				running[m.GroupID]--
				parallel--
				mu.Unlock()
			}()
			return h.Handle(ctx, m)
		})})
	sqstest.WaitCount(t, rec, q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)

	b.checkOnce(t, all)
	order := b.effectOrder(t)
	for g, want := range ids {
		if fmt.Sprint(order[g]) != fmt.Sprint(want) {
			t.Errorf("group %s wrote its effects in the order %v, want %v", g, order[g], want)
		}
	}
	rec.checkNoViolations(t)
	if p, f := met.processed.Load(), met.failed.Load(); p != groups*per || f != groups {
		t.Errorf("processed %d, failed %d; want %d and %d", p, f, groups*per, groups)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxPar < 2 {
		t.Errorf("at most %d handlers ran at once; the groups should run in parallel", maxPar)
	}
	sqstest.WaitCount(t, rec, q.DLQURL, 0, time.Second)
}

// TestFIFOGroupLock (the pass's SQS server): while the head of group g0 is in flight, held by its handler
// for more than two visibility timeouts (its lease extended by the heartbeat), no other message of
// g0 is delivered, though the worker has free slots and drains the two other groups meanwhile.
// When the head commits, the rest of g0 follows in order; each event has one effect. It needs
// fauxqs: GoAws's FIFO queues are unreliable.
func TestFIFOGroupLock(t *testing.T) {
	srv.Need(t, sqstest.FIFO)
	t.Parallel()
	const groups, per = 3, 4
	const vis = 2 * time.Second
	b := setupOrdered(t)
	rec := newGroupRecorder()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "fifo-lock", FIFO: true, VisibilityTimeout: vis, MaxReceiveCount: 5})
	ids, all, msgs := fifoEvents(groups, per)
	if err := sqstest.Send(t.Context(), rec, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	head := ids["g0"][0]
	h := b.handler(t, nil)
	var mu sync.Mutex
	delivered := map[string][]string{} // per group, the event ids in delivery order
	othersDone := 0
	var heldWith []string // g0's deliveries when the head let go
	holdErr := make(chan error, 1)
	met := &counters{}
	w := workertest.Start(t, rec, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			key, err := inboxhandler.DefaultKey(m)
			if err != nil {
				return err
			}
			mu.Lock()
			delivered[m.GroupID] = append(delivered[m.GroupID], key)
			mu.Unlock()
			if key == head && m.ReceiveCount == 1 {
				ok := sqstest.PollUntil(ctx, 30*time.Second, func() bool {
					mu.Lock()
					defer mu.Unlock()
					if len(delivered["g0"]) > 1 {
						return true // the lock is broken; the checks below say how
					}
					// Three extensions per visibility timeout: over two timeouts in flight.
					return othersDone == (groups-1)*per && rec.extended(m.ReceiptHandle) >= 7
				})
				mu.Lock()
				heldWith = append([]string(nil), delivered["g0"]...)
				done := othersDone
				mu.Unlock()
				if !ok {
					holdErr <- fmt.Errorf("while the head was held, %d of %d messages of the other groups were handled and it was extended %d times (context: %s)",
						done, (groups-1)*per, rec.extended(m.ReceiptHandle), fmt.Sprint(context.Cause(ctx)))
					return errors.New("hold failed")
				}
			}
			err = h.Handle(ctx, m)
			if err == nil && m.GroupID != "g0" {
				mu.Lock()
				othersDone++
				mu.Unlock()
			}
			return err
		})})
	sqstest.WaitCount(t, rec, q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)
	select {
	case err := <-holdErr:
		t.Fatal(err)
	default:
	}

	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(heldWith) != fmt.Sprint([]string{head}) {
		t.Errorf("group g0 delivered %v while its head was in flight, want only the head", heldWith)
	}
	for g, want := range ids {
		if fmt.Sprint(delivered[g]) != fmt.Sprint(want) {
			t.Errorf("group %s delivered %v, want %v (each once, in order)", g, delivered[g], want)
		}
	}
	b.checkOnce(t, all)
	order := b.effectOrder(t)
	for g, want := range ids {
		if fmt.Sprint(order[g]) != fmt.Sprint(want) {
			t.Errorf("group %s wrote its effects in the order %v, want %v", g, order[g], want)
		}
	}
	rec.checkNoViolations(t)
}

// TestFIFODeduplication (the pass's SQS server): the server's five-minute deduplication comes before the
// inbox, and the inbox catches what it cannot. On a FIFO queue with content-based deduplication:
// a message sent twice with the same MessageDeduplicationId is stored once (the second send
// answers with the first's MessageId), and so is one sent twice with the same body and no
// deduplication id; neither copy reaches the worker. A producer retry that used a new
// deduplication id for the same event_id is stored and delivered, and the inbox makes it a
// duplicate. Each event has one effect. It needs fauxqs: GoAws ignores content-based
// deduplication, and its FIFO queues are unreliable.
func TestFIFODeduplication(t *testing.T) {
	srv.Need(t, sqstest.FIFO, sqstest.ContentDedup)
	t.Parallel()
	b := setup(t, nil)
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "fifo-dedup", FIFO: true, MaxReceiveCount: 5})
	if _, err := c.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.URL),
		Attributes: map[string]string{string(types.QueueAttributeNameContentBasedDeduplication): "true"}}); err != nil {
		t.Fatal(err)
	}
	suffix := randHex(3)
	e1, e2, e3 := "e1-"+suffix, "e2-"+suffix, "e3-"+suffix
	send := func(event, dedupID string) string {
		t.Helper()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(fmt.Sprintf(`{"id":%q}`, event)),
			MessageGroupId: aws.String("g")}
		if dedupID != "" {
			in.MessageDeduplicationId = aws.String(dedupID)
		}
		out, err := c.SendMessage(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.MessageId)
	}
	id1, id1again := send(e1, "dedup-"+e1), send(e1, "dedup-"+e1)
	id2, id2retry := send(e2, "dedup-"+e2+"-a"), send(e2, "dedup-"+e2+"-b") // a producer retry with a new dedup id
	id3, id3again := send(e3, ""), send(e3, "")                             // content-based
	if id1again != id1 || id3again != id3 {
		t.Errorf("the deduplicated sends answered MessageIds %s and %s, want the first sends' %s and %s", id1again, id3again, id1, id3)
	}
	if id2retry == id2 {
		t.Errorf("the retry with a new deduplication id answered the first send's MessageId %s", id2)
	}
	if n, err := sqstest.Count(t.Context(), c, q.URL); err != nil || n != 4 {
		t.Fatalf("%d messages stored (%v), want 4: e1, e2 twice, e3", n, err)
	}

	h := b.handler(t, nil)
	var mu sync.Mutex
	seen := map[string]int{} // handler calls per MessageId
	met := &counters{}
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			mu.Lock()
			seen[m.ID]++
			mu.Unlock()
			return h.Handle(ctx, m)
		})})
	sqstest.WaitCount(t, c, q.URL, 0, 30*time.Second)
	workertest.Stop(t, w)

	b.checkOnce(t, []string{e1, e2, e3})
	if p, d := met.processed.Load(), met.duplicates.Load(); p != 3 || d != 1 {
		t.Errorf("processed %d, duplicates %d; want 3 and 1 (the producer retry)", p, d)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{id1: 1, id2: 1, id2retry: 1, id3: 1}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("handler calls per MessageId %v, want %v", seen, want)
	}
}

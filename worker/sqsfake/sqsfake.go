// Package sqsfake is an in-process, fault-injecting SQS for tests: it implements the calls the
// worker makes (worker.SQSClient), plus SendMessage and SendMessageBatch, so a *Fake is given to
// worker.New where an *sqs.Client would be. It needs no server and no network.
//
// # What it models
//
// Queues (standard and FIFO, by the name's ".fifo" suffix; a standard queue keeps MessageGroupId
// and can deliver as a fair queue: [QueueOptions].Fair), long polling, visibility timeouts
// and their changes, receive counts (ApproximateReceiveCount), FIFO group locking (no message of
// a group is delivered while an earlier one is in flight), redrive to a dead-letter queue on the
// receive after maxReceiveCount, and SQS's 12-hour visibility cap, counted from each receive. It
// follows SQS's documented behaviour; where SQS is vague (a stale receipt handle on a standard
// queue), it takes the harsher reading. Requests that SQS would refuse are refused, and recorded
// in [Fake.Violations], so a test can assert that the code under test asked for nothing illegal.
//
// # Faults
//
// [Faults] injects what no local server produces: any call failing (throttling, 5xx, KMS or
// OverLimit errors; see [Throttled] and friends), single entries of a DeleteMessageBatch failing,
// a message delivered twice in one batch, a receive whose response is lost, and the absence of
// ChangeMessageVisibilityBatch. [Fake.AgeFirstReceive] and [Fake.AgeReceive] move receive times
// back, to reach the 12-hour cap without waiting.
//
// # Inspecting
//
// [Fake.Messages] returns every message's state (receive count, deleted, deletes, in flight),
// [Fake.Len] the messages not deleted, [Fake.Calls] how often each call was served.
//
// The surface above is stable: new fields and methods may be added, none removed. sqsinbox's
// own tests use it for the faults; everything a real server can show they also test against one.
package sqsfake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// MaxVisibility is SQS's 12-hour visibility cap, which the fake enforces for each receive as SQS
// does (the 12-hour cap: see worker/lease.go).
const MaxVisibility = 12 * time.Hour

// Error returns an API error with the given code, as the SDK returns for SQS error responses.
func Error(code, msg string) error {
	return &smithy.GenericAPIError{Code: code, Message: msg, Fault: smithy.FaultServer}
}

// Common faults.
var (
	// Throttled is what SQS returns when a caller exceeds its request rate.
	Throttled = Error("ThrottlingException", "Rate exceeded")
	// KMSThrottled is returned for an encrypted queue when KMS throttles; the SDK does not retry it.
	KMSThrottled = Error("KmsThrottled", "KMS throttled the request")
	// OverLimit is returned when too many messages are in flight; the SDK does not retry it.
	OverLimit = Error("OverLimit", "Too many messages in flight")
	// Unavailable stands for a 5xx that the SDK's retries did not get past.
	Unavailable = Error("ServiceUnavailable", "Service Unavailable")
)

// Faults says which faults a Fake injects. Every field is optional.
type Faults struct {
	// Before is called at the start of every call with the operation name (such as
	// "ReceiveMessage") and the call's input (such as *sqs.ReceiveMessageInput). A non-nil error
	// fails the call with it. It runs under the fake's lock: it must not call the fake.
	Before func(op string, input any) error
	// DeleteEntry is called for each entry of DeleteMessageBatch with its receipt handle. A
	// non-empty code fails that entry (and only it) with the code.
	DeleteEntry func(receiptHandle string) (code string)
	// DuplicateInBatch, when it returns true for a message being received, puts the message in the
	// same batch a second time with a second receipt handle (SQS's at-least-once delivery).
	DuplicateInBatch func(body string) bool
	// NoChangeVisibilityBatch makes ChangeMessageVisibilityBatch fail as GoAws does (it does not
	// implement it).
	NoChangeVisibilityBatch bool
	// LoseReceive, when it returns true, makes a ReceiveMessage that took messages fail instead
	// of returning them: the messages are in flight, invisible until their visibility timeout
	// ends, and nobody holds their receipt handles, as when the response is lost on the wire.
	LoseReceive func() bool
}

// QueueOptions says what queue CreateQueue makes.
type QueueOptions struct {
	// Name is the queue's name; a FIFO queue's ends in ".fifo".
	Name string
	// VisibilityTimeout is the queue's default. 0 means 30 s.
	VisibilityTimeout time.Duration
	// Retention is the MessageRetentionPeriod. 0 means 4 days.
	Retention time.Duration
	// DeadLetterQueue is the URL of a queue of this fake to redrive to, with MaxReceiveCount.
	DeadLetterQueue string
	// MaxReceiveCount is the redrive policy's maxReceiveCount.
	MaxReceiveCount int
	// Fair makes a standard queue deliver as an SQS fair queue does, in a simple form: a receive
	// returns the visible messages of quiet message groups before those of noisy ones. A group is
	// noisy when it holds at least 30 of the queue's in-flight messages and more than 10% of them;
	// a message without a group id is a tenant of its own, never noisy. Without Fair (the
	// default) a receive returns the oldest visible messages, whatever their groups. Either way
	// a standard queue keeps each message's MessageGroupId and returns it when the receive asks
	// for it (MessageSystemAttributeNames All or MessageGroupId), as SQS does.
	Fair bool
}

// Fake is an in-memory SQS. The zero value is not usable; call New.
type Fake struct {
	mu      sync.Mutex
	queues  map[string]*queue // by URL
	byName  map[string]*queue
	seq     int64
	changed chan struct{} // closed and replaced on every change that can make a message visible
	faults  Faults
	calls   map[string]int
	viol    []string
	offset  time.Duration
}

type queue struct {
	name, url, arn string
	fifo, fair     bool
	vis, retention time.Duration
	dlq            *queue
	maxReceive     int
	msgs           []*message // every message ever sent, for Messages
	live           []*message // messages not known to be deleted, in order, for receives
	// For Fair: each group's messages not known to be deleted, in order, and the messages
	// handed out (in flight until deleted or visible again).
	groupLive map[string][]*message
	handedOut map[*message]struct{}
	handles   map[string]*message
}

type message struct {
	seq          int64 // send order
	id, body     string
	attrs        map[string]types.MessageAttributeValue
	group        string
	sent         time.Time
	receives     int
	firstReceive time.Time
	receivedAt   time.Time // when the fake took the ReceiveMessage request of the current delivery
	visibleAt    time.Time
	valid        map[string]bool // receipt handles of the current delivery
	deleted      bool
	deletes      int // successful deletes
}

// New returns an empty fake.
func New() *Fake {
	return &Fake{queues: map[string]*queue{}, byName: map[string]*queue{}, changed: make(chan struct{}), calls: map[string]int{}}
}

// SetFaults replaces the faults the fake injects.
func (f *Fake) SetFaults(fl Faults) {
	f.mu.Lock()
	f.faults = fl
	f.mu.Unlock()
}

// CreateQueue creates a queue and returns its URL.
func (f *Fake) CreateQueue(o QueueOptions) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := &queue{
		name: o.Name, url: "https://sqs.fake.local/000000000000/" + o.Name,
		arn:  "arn:aws:sqs:us-east-1:000000000000:" + o.Name,
		fifo: strings.HasSuffix(o.Name, ".fifo"), fair: o.Fair, vis: o.VisibilityTimeout, retention: o.Retention,
		maxReceive: o.MaxReceiveCount, handles: map[string]*message{},
	}
	if q.vis == 0 {
		q.vis = 30 * time.Second
	}
	if q.retention == 0 {
		q.retention = 4 * 24 * time.Hour
	}
	if o.DeadLetterQueue != "" {
		q.dlq = f.queues[o.DeadLetterQueue]
	}
	f.queues[q.url] = q
	f.byName[q.name] = q
	return q.url
}

func (f *Fake) now() time.Time { return time.Now().Add(f.offset) }

// AgeFirstReceive moves the first receive of every message of the queue (received or not) back by
// d, as if it had been first received d ago. It changes ApproximateFirstReceiveTimestamp only, not
// the 12-hour cap ([MaxVisibility]).
func (f *Fake) AgeFirstReceive(queueURL string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, m := range f.queues[queueURL].msgs {
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.firstReceive = m.firstReceive.Add(-d)
	}
}

// AgeReceive moves the receive of every message of the queue now in flight back by d, as if SQS
// had taken the ReceiveMessage request that delivered it d ago, to bring the 12-hour cap of that
// delivery near. The messages stay in flight.
func (f *Fake) AgeReceive(queueURL string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, m := range f.queues[queueURL].msgs {
		if !m.deleted && m.visibleAt.After(now) {
			m.receivedAt = m.receivedAt.Add(-d)
		}
	}
}

// notify wakes long polls; f.mu must be held.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// begin counts a call and applies the Before fault; f.mu must be held.
func (f *Fake) begin(op, url string, in any) (*queue, error) {
	f.calls[op]++
	if f.faults.Before != nil {
		if err := f.faults.Before(op, in); err != nil {
			return nil, err
		}
	}
	q := f.queues[url]
	if q == nil && op != "GetQueueUrl" {
		return nil, Error("AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return q, nil
}

// Calls returns how many calls of op (such as "ReceiveMessage") the fake has served, failed
// ones included.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Violations lists the requests that real SQS would have refused and the fake refused too:
// visibility beyond the 12-hour cap, or a visibility change of a message not in flight.
func (f *Fake) Violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.viol...)
}

// MessageState is what the fake knows about one message.
type MessageState struct {
	ID           string
	Body         string
	ReceiveCount int
	Deleted      bool
	// Deletes counts successful deletes (more than one: deleted again with another handle).
	Deletes int
	// InFlight is true while the message is received and not yet visible again.
	InFlight bool
}

// Messages returns the state of every message ever sent to the queue (moved to a DLQ ones
// included, as deleted there), in send order.
func (f *Fake) Messages(queueURL string) []MessageState {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var out []MessageState
	for _, m := range f.queues[queueURL].msgs {
		out = append(out, MessageState{ID: m.id, Body: m.body, ReceiveCount: m.receives, Deleted: m.deleted,
			Deletes: m.deletes, InFlight: !m.deleted && m.visibleAt.After(now)})
	}
	return out
}

// Len returns the number of messages not deleted (visible or in flight).
func (f *Fake) Len(queueURL string) int {
	n := 0
	for _, m := range f.Messages(queueURL) {
		if !m.Deleted {
			n++
		}
	}
	return n
}

// SendMessage implements the SDK call.
func (f *Fake) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("SendMessage", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	m := f.add(q, aws.ToString(in.MessageBody), in.MessageAttributes, aws.ToString(in.MessageGroupId), in.DelaySeconds)
	return &sqs.SendMessageOutput{MessageId: aws.String(m.id)}, nil
}

// SendMessageBatch implements the SDK call.
func (f *Fake) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("SendMessageBatch", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		m := f.add(q, aws.ToString(e.MessageBody), e.MessageAttributes, aws.ToString(e.MessageGroupId), e.DelaySeconds)
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String(m.id)})
	}
	return out, nil
}

func (f *Fake) add(q *queue, body string, attrs map[string]types.MessageAttributeValue, group string, delay int32) *message {
	f.seq++
	now := f.now()
	m := &message{seq: f.seq, id: fmt.Sprintf("msg-%d", f.seq), body: body, attrs: attrs, group: group, sent: now,
		visibleAt: now.Add(time.Duration(delay) * time.Second)}
	q.msgs = append(q.msgs, m)
	q.live = append(q.live, m)
	if q.fair && !q.fifo {
		if q.groupLive == nil {
			q.groupLive, q.handedOut = map[string][]*message{}, map[*message]struct{}{}
		}
		q.groupLive[m.group] = append(q.groupLive[m.group], m)
	}
	f.notify()
	return m
}

// ReceiveMessage implements the SDK call, with long polling, visibility, receive counts, FIFO
// group locking and redrive to the DLQ on the receive after maxReceiveCount.
func (f *Fake) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	max := int(in.MaxNumberOfMessages)
	if max == 0 {
		max = 1
	}
	if max < 1 || max > 10 {
		return nil, Error("InvalidParameterValue", "MaxNumberOfMessages must be 1 to 10")
	}
	if in.WaitTimeSeconds < 0 || in.WaitTimeSeconds > 20 {
		return nil, Error("InvalidParameterValue", "WaitTimeSeconds must be 0 to 20")
	}
	deadline := time.Now().Add(time.Duration(in.WaitTimeSeconds) * time.Second)
	f.mu.Lock()
	requested := f.now() // this delivery's 12-hour cap counts from here (see worker/lease.go)
	q, err := f.begin("ReceiveMessage", aws.ToString(in.QueueUrl), in)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			f.mu.Unlock()
			return nil, err
		}
		vis := q.vis
		if in.VisibilityTimeout > 0 {
			vis = time.Duration(in.VisibilityTimeout) * time.Second
		}
		msgs, next := f.take(q, max, vis, requested, wantsGroup(in.MessageSystemAttributeNames))
		if len(msgs) > 0 && f.faults.LoseReceive != nil && f.faults.LoseReceive() {
			f.mu.Unlock()
			return nil, Error("RequestTimeout", "the response was lost")
		}
		if len(msgs) > 0 || !time.Now().Before(deadline) {
			f.mu.Unlock()
			return &sqs.ReceiveMessageOutput{Messages: msgs}, nil
		}
		ch := f.changed
		f.mu.Unlock()
		wait := time.Until(deadline)
		if !next.IsZero() {
			wait = min(wait, next.Sub(f.nowLocked())+time.Millisecond)
		}
		t := time.NewTimer(max64(wait, time.Millisecond))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f.mu.Lock()
	}
}

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

func (f *Fake) nowLocked() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now()
}

// wantsGroup reports whether a receive asks for the MessageGroupId system attribute.
func wantsGroup(names []types.MessageSystemAttributeName) bool {
	for _, n := range names {
		if n == types.MessageSystemAttributeNameAll || n == types.MessageSystemAttributeNameMessageGroupId {
			return true
		}
	}
	return false
}

// take receives up to max visible messages; f.mu must be held. next is when the earliest
// invisible message becomes visible, or zero. withGroup says whether the receive asked for
// MessageGroupId (a FIFO queue returns it regardless).
func (f *Fake) take(q *queue, max int, vis time.Duration, requested time.Time, withGroup bool) (out []types.Message, next time.Time) {
	now := f.now()
	for len(q.live) > 0 && q.live[0].deleted {
		q.live[0] = nil
		q.live = q.live[1:]
	}
	var blocked map[string]bool
	if q.fifo {
		blocked = map[string]bool{}
	}
	noisy := func(string) bool { return false }
	fair := q.fair && !q.fifo
	if fair {
		// In flight: handed out, not deleted, not visible again. The set stays about as large as
		// the consumers' holdings, so counting it costs little however long the backlog.
		inFlight, total := map[string]int{}, 0
		for m := range q.handedOut {
			if m.deleted || !m.visibleAt.After(now) {
				delete(q.handedOut, m)
				continue
			}
			if m.group != "" {
				inFlight[m.group]++
				total++
			}
		}
		noisy = func(g string) bool { n := inFlight[g]; return g != "" && n >= 30 && n*10 > total }
	}
	pass := func(wantNoisy bool) {
		for _, m := range q.live {
			if len(out) >= max {
				break
			}
			if m.deleted {
				continue
			}
			if m.visibleAt.After(now) {
				if next.IsZero() || m.visibleAt.Before(next) {
					next = m.visibleAt
				}
				if q.fifo {
					blocked[m.group] = true
				}
				continue
			}
			if q.fifo && blocked[m.group] {
				continue
			}
			if noisy(m.group) != wantNoisy {
				continue
			}
			if q.dlq != nil && q.maxReceive > 0 && m.receives >= q.maxReceive {
				m.deleted = true
				d := *m
				d.deleted, d.deletes, d.receives, d.valid, d.firstReceive = false, 0, 0, nil, time.Time{}
				d.visibleAt = now
				q.dlq.msgs = append(q.dlq.msgs, &d)
				q.dlq.live = append(q.dlq.live, &d)
				continue
			}
			out = append(out, f.deliver(q, m, now, vis, requested, withGroup))
			dup := f.faults.DuplicateInBatch
			if dup != nil && len(out) < max && dup(m.body) {
				out = append(out, f.deliver(q, m, now, vis, requested, withGroup))
			}
		}
	}
	if !fair {
		pass(false)
		return out, next
	}
	// The quiet groups' messages first, in send order, from each group's own list (so that a
	// noisy group's long backlog is not walked), then the noisy groups' from the front.
	var quiet []*message
	for g, ms := range q.groupLive {
		for len(ms) > 0 && ms[0].deleted {
			ms = ms[1:]
		}
		if len(ms) == 0 {
			delete(q.groupLive, g)
			continue
		}
		q.groupLive[g] = ms
		if noisy(g) {
			continue
		}
		visible := 0
		for _, m := range ms { // enough of the group for one receive
			if visible == max {
				break
			}
			quiet = append(quiet, m)
			if !m.deleted && !m.visibleAt.After(now) {
				visible++
			}
		}
	}
	slices.SortFunc(quiet, func(a, b *message) int { return cmp.Compare(a.seq, b.seq) })
	saved := q.live
	q.live = quiet
	pass(false)
	q.live = saved
	if len(out) < max {
		pass(true)
	}
	return out, next
}

// deliver hands m out once more with a new receipt handle.
func (f *Fake) deliver(q *queue, m *message, now time.Time, vis time.Duration, requested time.Time, withGroup bool) types.Message {
	if !m.visibleAt.After(now) || m.valid == nil {
		m.valid = map[string]bool{} // a new delivery: earlier handles go stale
	}
	m.receives++
	if m.firstReceive.IsZero() {
		m.firstReceive = now
	}
	m.visibleAt = now.Add(vis)
	m.receivedAt = requested
	if q.handedOut != nil {
		q.handedOut[m] = struct{}{}
	}
	f.seq++
	h := fmt.Sprintf("rh-%s-%d", m.id, f.seq)
	m.valid[h] = true
	q.handles[h] = m
	attrs := map[string]string{
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
	}
	if m.group != "" && (q.fifo || withGroup) {
		attrs["MessageGroupId"] = m.group
	}
	return types.Message{MessageId: aws.String(m.id), Body: aws.String(m.body), ReceiptHandle: aws.String(h),
		Attributes: attrs, MessageAttributes: m.attrs}
}

var errInvalidHandle = Error("ReceiptHandleIsInvalid", "The input receipt handle is invalid.")

// del deletes by receipt handle; f.mu must be held.
func (f *Fake) del(q *queue, h string) error {
	m := q.handles[h]
	switch {
	case m == nil:
		return errInvalidHandle
	case m.valid[h] || (m.deleted && !q.fifo):
		if !m.deleted {
			m.deleted = true
			m.deletes++
			f.notify()
		} else if m.valid[h] {
			m.deletes++ // deleted again with another handle of the same delivery
		}
		return nil
	case q.fifo:
		return Error("InvalidParameterValue", "The receipt handle has expired.")
	default:
		// A standard queue may answer success for a stale handle without deleting anything.
		return nil
	}
}

// DeleteMessage implements the SDK call.
func (f *Fake) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("DeleteMessage", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	if err := f.del(q, aws.ToString(in.ReceiptHandle)); err != nil {
		return nil, err
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// DeleteMessageBatch implements the SDK call, with per-entry failures.
func (f *Fake) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("DeleteMessageBatch", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	if err := checkBatch(len(in.Entries), func(i int) string { return aws.ToString(in.Entries[i].Id) }); err != nil {
		return nil, err
	}
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		h := aws.ToString(e.ReceiptHandle)
		code := ""
		if f.faults.DeleteEntry != nil {
			code = f.faults.DeleteEntry(h)
		}
		if code == "" {
			if err := f.del(q, h); err != nil {
				code = errCode(err)
			}
		}
		if code != "" {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String(code), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func checkBatch(n int, id func(int) string) error {
	if n == 0 {
		return Error("AWS.SimpleQueueService.EmptyBatchRequest", "no entries")
	}
	if n > 10 {
		return Error("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "more than 10 entries")
	}
	seen := map[string]bool{}
	for i := range n {
		if seen[id(i)] {
			return Error("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "ids not distinct")
		}
		seen[id(i)] = true
	}
	return nil
}

func errCode(err error) string {
	var ae *smithy.GenericAPIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return "InternalError"
}

// visibility changes the visibility of the message of handle h; f.mu must be held.
func (f *Fake) visibility(q *queue, h string, secs int32) error {
	m := q.handles[h]
	now := f.now()
	d := time.Duration(secs) * time.Second
	switch {
	case secs < 0 || d > MaxVisibility:
		f.viol = append(f.viol, fmt.Sprintf("visibility %v out of range", d))
		return Error("InvalidParameterValue", "VisibilityTimeout out of range")
	case m == nil || !m.valid[h] || m.deleted:
		return errInvalidHandle
	case !m.visibleAt.After(now):
		f.viol = append(f.viol, fmt.Sprintf("visibility change of %s, which is not in flight", m.id))
		return Error("AWS.SimpleQueueService.MessageNotInflight", "The message is not in flight.")
	case now.Add(d).After(m.receivedAt.Add(MaxVisibility)):
		f.viol = append(f.viol, fmt.Sprintf("visibility of %s to %v past the 12-hour cap (this delivery's receive was %v ago)",
			m.id, d, now.Sub(m.receivedAt).Round(time.Second)))
		return Error("InvalidParameterValue", "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
	}
	m.visibleAt = now.Add(d)
	if secs == 0 {
		m.valid = nil // visible again: its handles are stale
	}
	f.notify() // long polls recompute when the next message becomes visible
	return nil
}

// ChangeMessageVisibility implements the SDK call, refusing what SQS refuses.
func (f *Fake) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("ChangeMessageVisibility", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	if err := f.visibility(q, aws.ToString(in.ReceiptHandle), in.VisibilityTimeout); err != nil {
		return nil, err
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// ChangeMessageVisibilityBatch implements the SDK call, or fails as GoAws does when
// Faults.NoChangeVisibilityBatch is set.
func (f *Fake) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("ChangeMessageVisibilityBatch", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	if f.faults.NoChangeVisibilityBatch {
		return nil, fmt.Errorf("operation error SQS: ChangeMessageVisibilityBatch, deserialization failed: not implemented")
	}
	if err := checkBatch(len(in.Entries), func(i int) string { return aws.ToString(in.Entries[i].Id) }); err != nil {
		return nil, err
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if err := f.visibility(q, aws.ToString(e.ReceiptHandle), e.VisibilityTimeout); err != nil {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String(errCode(err)), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// GetQueueAttributes implements the SDK call (all attributes, whatever is asked).
func (f *Fake) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, err := f.begin("GetQueueAttributes", aws.ToString(in.QueueUrl), in)
	if err != nil {
		return nil, err
	}
	now := f.now()
	visible, inflight := 0, 0
	for _, m := range q.msgs {
		switch {
		case m.deleted:
		case m.visibleAt.After(now):
			inflight++
		default:
			visible++
		}
	}
	a := map[string]string{
		"QueueArn":                              q.arn,
		"VisibilityTimeout":                     strconv.Itoa(int(q.vis / time.Second)),
		"MessageRetentionPeriod":                strconv.Itoa(int(q.retention / time.Second)),
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inflight),
		"ApproximateNumberOfMessagesDelayed":    "0",
	}
	if q.fifo {
		a["FifoQueue"] = "true"
	}
	if q.dlq != nil {
		rp, _ := json.Marshal(map[string]any{"deadLetterTargetArn": q.dlq.arn, "maxReceiveCount": q.maxReceive})
		a["RedrivePolicy"] = string(rp)
	}
	return &sqs.GetQueueAttributesOutput{Attributes: a}, nil
}

// GetQueueUrl implements the SDK call.
func (f *Fake) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.begin("GetQueueUrl", "", in); err != nil {
		return nil, err
	}
	q := f.byName[aws.ToString(in.QueueName)]
	if q == nil {
		return nil, Error("AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
	}
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(q.url)}, nil
}

package reliability

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// AttrSeq is the message attribute that carries a send's sequence number, so that every message
// (a poison one too) can be found in the dead-letter queue.
const AttrSeq = "rel_seq"

// Kinds of events.
const (
	KindGood = "good"
	// Poison kinds: the message can never be processed and must end in the DLQ.
	KindUndecodable = "poison-undecodable" // not JSON, no key attribute
	KindMissingKey  = "poison-missing-key" // JSON without an id
	KindLongKey     = "poison-long-key"    // a key over 512 bytes
	KindNULKey      = "poison-nul-key"     // a key with a NUL byte
	KindBadUTF8Key  = "poison-bad-utf8"    // a key that is not valid UTF-8 (fake only: SQS cannot carry it)
	KindPanic       = "poison-panic"       // a valid key whose handler panics
)

// PoisonKinds are the poison kinds an SQS server can carry.
var PoisonKinds = []string{KindUndecodable, KindMissingKey, KindLongKey, KindNULKey, KindPanic}

// IsPoison reports whether kind is a poison kind.
func IsPoison(kind string) bool { return strings.HasPrefix(kind, "poison-") }

// Send statuses.
const (
	SendOK      = "ok"
	SendFailed  = "failed"  // the server refused: not stored
	SendUnknown = "unknown" // timeout or broken connection: maybe stored
)

// Event is one event the producer sends.
type Event struct {
	Key   string // the event key; for poison kinds, what goes on the wire
	Value string
	Kind  string
	// Group is the MessageGroupId on a FIFO queue; empty on a standard queue.
	Group string
	// Dedup is the MessageDeduplicationId on a FIFO queue. Empty means the key: a retried send
	// of the event is then dropped by the queue within its 5-minute deduplication window.
	Dedup string
	// Offload, if above 0, sends a good event's body padded to exactly this many bytes and
	// offloaded to S3 ([Producer.Payloads]): the message carries the pointer, the size attribute
	// and the key in the event_id attribute. 0 sends the body inline.
	Offload int
}

// GoodEvents returns n good events with keys prefix-i and unique values.
func GoodEvents(prefix string, n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{Key: fmt.Sprintf("%s-%06d", prefix, i), Value: fmt.Sprintf("v-%s-%06d-%s", prefix, i, randHex(3)), Kind: KindGood}
	}
	return out
}

// FIFOEvents returns n good events in groups message groups, in send order: event i is the
// (i/groups)-th of group i%groups, so that any run of up to groups consecutive events holds one
// event of each group.
func FIFOEvents(prefix string, n, groups int) []Event {
	out := GoodEvents(prefix, n)
	for i := range out {
		out[i].Group = fmt.Sprintf("%s-g%03d", prefix, i%groups)
	}
	return out
}

// OffloadedEvents returns n good events as [GoodEvents] does, every every-th of them (the first,
// then every every-th) offloaded to S3 with a payload of size bytes.
func OffloadedEvents(prefix string, n, every, size int) []Event {
	out := GoodEvents(prefix, n)
	for i := 0; i < n; i += every {
		out[i].Offload = size
	}
	return out
}

// PoisonEvents returns n poison events cycling through kinds.
func PoisonEvents(prefix string, n int, kinds []string) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{Key: fmt.Sprintf("%s-%06d", prefix, i), Value: fmt.Sprintf("pv-%s-%06d", prefix, i), Kind: kinds[i%len(kinds)]}
	}
	return out
}

// Producer sends events and records every send (one record per SQS message it tried to create).
// The records are kept in memory, so that a database outage does not stop the producer.
type Producer struct {
	Run *Run
	// Client sends; nil means Run.Client.
	Client interface {
		SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	}
	// Retries is how many more times a failed or unknown send is retried, with the same key
	// and value (a new SQS message), as a retrying producer does.
	Retries int
	// Timeout bounds each send call. 0 means 10 s.
	Timeout time.Duration
	// Parallel is the number of concurrent senders. 0 means 4.
	Parallel int
	// Batch is the number of messages per SendMessageBatch call, at most 10. 0 means 10.
	Batch int
	// Topic, if set, makes the producer publish to this SNS topic (PublishBatch, Batch entries
	// per call) instead of sending to Run.Queue; each good event also carries its key in the
	// event_id message attribute. The run's queue is subscribed to it (RunOptions.Topic).
	Topic *sqstest.Topic
	// SNS publishes to Topic; nil means Run.SNS.
	SNS sqstest.Publisher
	// Payloads puts the payloads of offloaded events (Event.Offload) in S3, once per send; nil
	// means Run.Payloads.
	Payloads *s3payload.Writer

	seq   atomic.Int64
	mu    sync.Mutex
	sends []Send
}

// Send is the record of one SQS message the producer tried to create.
type Send struct {
	Seq   int64
	Key   string
	Value string
	Kind  string
	// Group is the event's MessageGroupId (FIFO), or empty.
	Group  string
	Status string
	// Payload is the SHA-256 (hex) of the payload this send offloaded to S3, or empty when the
	// body went inline.
	Payload string
}

// Send sends events in batches of Batch (10), spread evenly over spread (0: as fast as
// possible). Each batch's failed and unknown sends are retried before its sender takes another
// batch, so with Parallel 1 the queue accepts the events in the order given (on a FIFO queue:
// a retry of a stored message is dropped as a duplicate, and the next batch waits for it). That
// holds within each message group as long as a batch holds at most one event of a group.
func (p *Producer) Send(ctx context.Context, events []Event, spread time.Duration) error {
	par := p.Parallel
	if par == 0 {
		par = 4
	}
	size := p.Batch
	if size <= 0 || size > 10 {
		size = 10
	}
	batches := (len(events) + size - 1) / size
	var interval time.Duration
	if spread > 0 && batches > 0 {
		interval = spread / time.Duration(batches)
	}
	start := time.Now()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(par)
	for b := 0; b < batches; b++ {
		if interval > 0 {
			if err := sleep(ctx, time.Until(start.Add(time.Duration(b)*interval))); err != nil {
				break
			}
		}
		batch := events[b*size : min(len(events), b*size+size)]
		g.Go(func() error { return p.sendBatch(ctx, batch) })
	}
	return g.Wait()
}

type sendRow struct {
	seq     int64
	ev      Event
	status  string
	payload string // the offloaded payload's SHA-256, or empty
}

func (p *Producer) sendBatch(ctx context.Context, batch []Event) error {
	c := p.Client
	if c == nil {
		c = p.Run.Client
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	todo := batch
	for attempt := 0; attempt <= p.Retries && len(todo) > 0; attempt++ {
		rows := make([]sendRow, len(todo))
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(todo))
		evs := make([]Event, 0, len(todo))
		notPut := map[int]bool{}
		for i, ev := range todo {
			rows[i] = sendRow{seq: p.seq.Add(1), ev: ev}
			e := entry(strconv.Itoa(i), rows[i].seq, ev)
			if ev.Offload > 0 && ev.Kind == KindGood {
				sum, err := p.offload(ctx, timeout, &e, ev)
				if err != nil {
					// No message was sent: a failed send, retried with a new payload put.
					notPut[i] = true
					continue
				}
				rows[i].payload = sum
			}
			entries = append(entries, e)
			evs = append(evs, ev)
		}
		var failed map[string]bool
		var err error
		if len(entries) > 0 {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			if p.Topic != nil {
				failed, err = p.publish(cctx, entries, evs)
			} else {
				failed, err = sendEntries(cctx, c, p.Run.Queue.URL, entries)
			}
			cancel()
		}
		status := SendOK
		if err != nil {
			status = classify(err)
		}
		var retry []Event
		for i := range rows {
			rows[i].status = status
			if failed[strconv.Itoa(i)] || notPut[i] {
				rows[i].status = SendFailed
			}
			if rows[i].status != SendOK {
				retry = append(retry, rows[i].ev)
			}
		}
		p.record(rows)
		if err := ctx.Err(); err != nil {
			return err
		}
		todo = retry
		if len(todo) > 0 {
			_ = sleep(ctx, (100*time.Millisecond)<<attempt) // 0.1 s, 0.2 s, 0.4 s, ...
		}
	}
	return nil
}

// offload pads ev's body (in e) to exactly ev.Offload bytes, puts it in S3 and makes e the
// pointer message: the pointer body, the size attribute and the event_id attribute (the key, as
// an extended client's user sets it: the pointer body has no id). It returns the payload's
// SHA-256 in hex.
func (p *Producer) offload(ctx context.Context, timeout time.Duration, e *types.SendMessageBatchRequestEntry, ev Event) (string, error) {
	w := p.Payloads
	if w == nil {
		w = p.Run.Payloads
	}
	if w == nil {
		return "", errors.New("reliability: an offloaded event without Producer.Payloads or Run.Payloads")
	}
	var b Body
	if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &b); err != nil {
		return "", err
	}
	payload, err := padded(b, ev.Offload)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o, err := w.Put(cctx, ev.Key, payload)
	if err != nil {
		return "", err
	}
	e.MessageBody = aws.String(o.Body)
	e.MessageAttributes[o.Attribute] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(o.Size)}
	e.MessageAttributes[inboxhandler.DefaultAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(ev.Key)}
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:]), nil
}

// padded returns b as JSON of exactly size bytes, filled up with Body.Pad.
func padded(b Body, size int) ([]byte, error) {
	b.Pad = ""
	base := len(mustJSON(b))
	n := size - base - len(`,"pad":""`)
	if n <= 0 {
		return nil, fmt.Errorf("reliability: a payload of %d bytes cannot hold the body (%d bytes)", size, base)
	}
	b.Pad = strings.Repeat("x", n)
	out := []byte(mustJSON(b))
	if len(out) != size {
		return nil, fmt.Errorf("reliability: padded payload of %d bytes, want %d", len(out), size)
	}
	return out, nil
}

// sendEntries sends entries to the queue and returns the Ids of the entries the server refused.
func sendEntries(ctx context.Context, c interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}, url string, entries []types.SendMessageBatchRequestEntry) (map[string]bool, error) {
	out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		return nil, err
	}
	failed := map[string]bool{}
	for _, f := range out.Failed {
		failed[aws.ToString(f.Id)] = true
	}
	return failed, nil
}

// publish publishes entries (the SQS messages of evs) to p.Topic in one PublishBatch, with the
// same bodies and attributes, plus the event_id attribute of each good event, and returns the
// Ids of the entries SNS refused.
func (p *Producer) publish(ctx context.Context, entries []types.SendMessageBatchRequestEntry, evs []Event) (map[string]bool, error) {
	c := p.SNS
	if c == nil {
		c = p.Run.SNS
	}
	pe := make([]snstypes.PublishBatchRequestEntry, len(entries))
	for i, e := range entries {
		attrs := make(map[string]snstypes.MessageAttributeValue, len(e.MessageAttributes)+1)
		for k, v := range e.MessageAttributes {
			attrs[k] = snstypes.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue}
		}
		if evs[i].Kind == KindGood {
			attrs[inboxhandler.DefaultAttribute] = snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(evs[i].Key)}
		}
		pe[i] = snstypes.PublishBatchRequestEntry{Id: e.Id, Message: e.MessageBody, MessageAttributes: attrs,
			MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId}
	}
	out, err := c.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(p.Topic.ARN), PublishBatchRequestEntries: pe})
	if err != nil {
		return nil, err
	}
	failed := map[string]bool{}
	for _, f := range out.Failed {
		failed[aws.ToString(f.Id)] = true
	}
	return failed, nil
}

// classify tells a refused send (a 4xx answer: nothing stored) from one whose outcome is unknown.
func classify(err error) string {
	var re interface{ HTTPStatusCode() int }
	var ae smithy.APIError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 && errors.As(err, &ae) {
		return SendFailed
	}
	return SendUnknown
}

// entry builds the SQS message of an event.
func entry(id string, seq int64, ev Event) types.SendMessageBatchRequestEntry {
	attrs := map[string]types.MessageAttributeValue{
		AttrSeq: {DataType: aws.String("String"), StringValue: aws.String(strconv.FormatInt(seq, 10))},
	}
	var body string
	switch ev.Kind {
	case KindUndecodable:
		body = "not json: " + ev.Value
	case KindMissingKey:
		body = mustJSON(Body{Value: ev.Value, Seq: seq})
	case KindLongKey:
		body = mustJSON(Body{ID: strings.Repeat("k", 600), Value: ev.Value, Seq: seq})
	case KindNULKey:
		body = mustJSON(Body{ID: ev.Key + "\x00", Value: ev.Value, Seq: seq})
	case KindBadUTF8Key:
		// Built by hand: encoding/json would replace the invalid bytes.
		body = `{"id":"` + ev.Key + "\xff\xfe" + `","value":"` + ev.Value + `","seq":` + strconv.FormatInt(seq, 10) + `}`
	case KindPanic:
		body = mustJSON(Body{ID: ev.Key, Value: ev.Value, Seq: seq, Panic: true})
	default:
		body = mustJSON(Body{ID: ev.Key, Value: ev.Value, Seq: seq})
	}
	e := types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body), MessageAttributes: attrs}
	if ev.Group != "" {
		e.MessageGroupId = aws.String(ev.Group)
		e.MessageDeduplicationId = aws.String(cmp.Or(ev.Dedup, ev.Key))
	}
	return e
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (p *Producer) record(rows []sendRow) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rows {
		p.sends = append(p.sends, Send{Seq: r.seq, Key: r.ev.Key, Value: r.ev.Value, Kind: r.ev.Kind, Group: r.ev.Group, Status: r.status, Payload: r.payload})
	}
}

// OKKeys returns the number of distinct good keys sent successfully at least once.
func (p *Producer) OKKeys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := map[string]bool{}
	for _, s := range p.sends {
		if s.Status == SendOK && !IsPoison(s.Kind) {
			keys[s.Key] = true
		}
	}
	return len(keys)
}

// Sends returns every send recorded so far.
func (p *Producer) Sends() []Send {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Send(nil), p.sends...)
}

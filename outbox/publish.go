package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/internal/core/plainbody"
	"golang.org/x/sync/errgroup"
)

// SQSClient is the part of the SQS API that the relay uses. Its method copies the signature of
// *sqs.Client exactly, so an *sqs.Client satisfies it with no adapter.
type SQSClient interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// SNSClient is the part of the SNS API that the relay uses. Its method copies the signature of
// *sns.Client exactly, so an *sns.Client satisfies it with no adapter.
type SNSClient interface {
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, optFns ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
}

// MaxBatchEntries is the number of entries SendMessageBatch and PublishBatch take.
const MaxBatchEntries = 10

// row is a claimed outbox row.
type row struct {
	id          int64
	eventID     string
	kind        Kind
	destination string
	fifo        bool
	body        string
	attrs       map[string]storedAttribute
	groupID     string
	dedupID     string
	delay       int32
	size        int
	offload     bool // its body goes to S3 before it is published (RelayConfig.Payloads)
}

func (r *row) decode(raw []byte) error {
	if err := json.Unmarshal(raw, &r.attrs); err != nil {
		return fmt.Errorf("outbox: row %d: attributes: %w", r.id, err)
	}
	r.size = len(r.body) + len(EventIDAttribute) + len("String") + len(r.eventID)
	for k, a := range r.attrs {
		r.size += len(k) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return nil
}

// batches splits rows (one destination) into batches of at most MaxBatchEntries entries and
// maxBytes of payload; a row larger than maxBytes goes alone.
func batches(rows []*row, maxBytes int) [][]*row {
	var out [][]*row
	var cur []*row
	size := 0
	for _, r := range rows {
		if len(cur) > 0 && (len(cur) == MaxBatchEntries || size+r.size > maxBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, r)
		size += r.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// publish sends one batch and returns, per row, nil or why it failed. A failed call fails every
// entry; an entry that the answer neither lists as successful nor as failed counts as failed.
func (rl *Relay) publish(ctx context.Context, batch []*row) []error {
	errs := make([]error, len(batch))
	ok := make([]bool, len(batch))
	failed := func(id, code, msg string, sender bool) {
		i, err := strconv.Atoi(id)
		if err != nil || i < 0 || i >= len(batch) {
			return
		}
		errs[i] = fmt.Errorf("%s: %s (sender fault %v)", code, msg, sender)
	}
	succeeded := func(id string) {
		if i, err := strconv.Atoi(id); err == nil && i >= 0 && i < len(batch) {
			ok[i] = true
		}
	}
	var callErr error
	switch batch[0].kind {
	case KindSQS:
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(batch[0].destination), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(batch))}
		for i, r := range batch {
			e := sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(r.body),
				MessageAttributes: make(map[string]sqstypes.MessageAttributeValue, len(r.attrs)+1)}
			for k, a := range r.attrs {
				v := sqstypes.MessageAttributeValue{DataType: aws.String(a.DataType), BinaryValue: a.BinaryValue}
				if a.StringValue != "" {
					v.StringValue = aws.String(a.StringValue)
				}
				e.MessageAttributes[k] = v
			}
			e.MessageAttributes[EventIDAttribute] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r.eventID)}
			if r.groupID != "" {
				e.MessageGroupId = aws.String(r.groupID)
			}
			if r.dedupID != "" {
				e.MessageDeduplicationId = aws.String(r.dedupID)
			}
			if r.delay > 0 {
				e.DelaySeconds = r.delay
			}
			in.Entries[i] = e
		}
		out, err := rl.cfg.SQS.SendMessageBatch(ctx, in, rl.sqsOpt)
		if callErr = err; err == nil {
			for _, s := range out.Successful {
				succeeded(aws.ToString(s.Id))
			}
			for _, f := range out.Failed {
				failed(aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
			}
		}
	case KindSNS:
		in := &sns.PublishBatchInput{TopicArn: aws.String(batch[0].destination), PublishBatchRequestEntries: make([]snstypes.PublishBatchRequestEntry, len(batch))}
		for i, r := range batch {
			e := snstypes.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), Message: aws.String(r.body),
				MessageAttributes: make(map[string]snstypes.MessageAttributeValue, len(r.attrs)+1)}
			for k, a := range r.attrs {
				v := snstypes.MessageAttributeValue{DataType: aws.String(a.DataType), BinaryValue: a.BinaryValue}
				if a.StringValue != "" {
					v.StringValue = aws.String(a.StringValue)
				}
				e.MessageAttributes[k] = v
			}
			e.MessageAttributes[EventIDAttribute] = snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r.eventID)}
			if r.groupID != "" {
				e.MessageGroupId = aws.String(r.groupID)
			}
			if r.dedupID != "" {
				e.MessageDeduplicationId = aws.String(r.dedupID)
			}
			in.PublishBatchRequestEntries[i] = e
		}
		out, err := rl.cfg.SNS.PublishBatch(ctx, in, rl.snsOpt)
		if callErr = err; err == nil {
			for _, s := range out.Successful {
				succeeded(aws.ToString(s.Id))
			}
			for _, f := range out.Failed {
				failed(aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
			}
		}
	}
	for i := range batch {
		switch {
		case callErr != nil:
			errs[i] = callErr
		case errs[i] == nil && !ok[i]:
			errs[i] = fmt.Errorf("the answer lists entry %d neither as successful nor as failed", i)
		}
	}
	return errs
}

// idleConns is the most idle connections the relay has an SDK client keep: as many as its
// senders' calls in flight (MaxSenders), and as many again. The SDK's default client keeps 10; a
// call that ends while 10 are idle closes its connection, and the next one dials again.
const idleConns = 2 * MaxSenders

// sqsOption and snsOption return the option the relay passes on every publish call. Each works
// around an aws-sdk-go-v2 fault (#2737) in the HTTP layer every client shares (see
// internal/core/plainbody: a SendMessageBatch or PublishBatch retried after a lost answer sends
// twice), on a copy of the SDK's default HTTP client that keeps idleConns idle connections
// (plainbody.WrapKeeping). The wrapping is done once, not per call.
func sqsOption(c SQSClient) func(*sqs.Options) {
	oc, ok := c.(interface{ Options() sqs.Options })
	if !ok {
		return func(o *sqs.Options) { o.HTTPClient = plainbody.Wrap(o.HTTPClient) }
	}
	hc := plainbody.WrapKeeping(oc.Options().HTTPClient, idleConns)
	return func(o *sqs.Options) { o.HTTPClient = hc }
}

func snsOption(c SNSClient) func(*sns.Options) {
	oc, ok := c.(interface{ Options() sns.Options })
	if !ok {
		return func(o *sns.Options) { o.HTTPClient = plainbody.Wrap(o.HTTPClient) }
	}
	hc := plainbody.WrapKeeping(oc.Options().HTTPClient, idleConns)
	return func(o *sns.Options) { o.HTTPClient = hc }
}

// offload puts the bodies of the rows marked for it in S3 (at most MaxBatchEntries at once) and
// replaces each with its pointer and the reserved size attribute. It returns the rows ready to
// publish, and, per row of rows, why its upload failed (nil otherwise).
func (rl *Relay) offload(ctx context.Context, rows []*row) ([]*row, []error) {
	errs := make([]error, len(rows))
	var g errgroup.Group
	some := false
	for i, r := range rows {
		if !r.offload {
			continue
		}
		some = true
		if len(r.attrs) > MaxAttributes-2 {
			errs[i] = fmt.Errorf("outbox: the message has %d attributes; offloaded to S3 it may have at most %d, since the relay adds %s and the size attribute", len(r.attrs), MaxAttributes-2, EventIDAttribute)
			continue
		}
		g.Go(func() error {
			errs[i] = rl.offloadRow(ctx, r) // one failure does not stop the others
			return nil
		})
	}
	if !some {
		return rows, errs
	}
	_ = g.Wait()
	ready := make([]*row, 0, len(rows))
	for i, r := range rows {
		if errs[i] == nil {
			ready = append(ready, r)
		}
	}
	return ready, errs
}

// offloadRow puts r's body in S3 and makes r a pointer to it.
func (rl *Relay) offloadRow(ctx context.Context, r *row) error {
	o, err := rl.cfg.Payloads.Put(ctx, r.eventID, []byte(r.body))
	if err != nil {
		return err
	}
	r.body, r.offload = o.Body, false
	if r.attrs == nil {
		r.attrs = map[string]storedAttribute{}
	}
	r.attrs[o.Attribute] = storedAttribute{DataType: "Number", StringValue: o.Size}
	return nil
}

package reliability

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DrainResult is what the final drain found.
type DrainResult struct {
	// DLQ is what the dead-letter queue held after the first drain.
	DLQ []DLQMessage
	// Redriven are the keys of DLQ messages whose events had effects; they were sent back to
	// the queue and drained again. EffectsBeforeRedrive counts their effects before that.
	Redriven             []string
	EffectsBeforeRedrive int
	// Rounds counts the worker runs the drain needed.
	Rounds int
}

// DrainOptions tunes [Run.Drain].
type DrainOptions struct {
	// Worker configures the healthy worker; its zero value means the run's defaults.
	Worker *WorkerConfig
	// Timeout bounds the whole drain. 0 means 5 minutes.
	Timeout time.Duration
}

// Drain is the final drain. Every fault must be healed and every worker of the scenario ended.
// It runs a healthy worker until the queue stays empty (its count at zero several times in a
// row, then several consecutive empty receives of its own), reads the dead-letter queue (with
// attributes), redrives the DLQ messages whose events were processed, and drains again.
func (r *Run) Drain(ctx context.Context, o DrainOptions) (*DrainResult, error) {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wc := r.WorkerConfig("drain")
	if o.Worker != nil {
		wc = *o.Worker
	}
	if wc.Concurrency == 0 {
		wc.Concurrency = 16
	}
	if wc.Backoff == 0 {
		wc.Backoff = 200 * time.Millisecond
	}
	if wc.Client == nil && !r.GoAws {
		wc.Client = r.Client
	}
	res := &DrainResult{}
	if err := r.drainQueue(ctx, wc, res); err != nil {
		return res, err
	}
	dlq, handles, err := r.readDLQ(ctx)
	if err != nil {
		return res, err
	}
	res.DLQ = dlq
	var redrive []types.Message
	var keys []string
	for i, m := range dlq {
		if m.Key == "" {
			continue
		}
		var n int
		if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE key = $1`, m.Key).Scan(&n); err != nil {
			return res, err
		}
		if n > 0 {
			redrive = append(redrive, handles[i])
			keys = append(keys, m.Key)
			res.EffectsBeforeRedrive += n
		}
	}
	if !r.FIFO { // a FIFO DLQ's messages were deleted as they were read
		if err := r.deleteAll(ctx, r.Queue.DLQURL, handles); err != nil {
			return res, err
		}
	}
	if len(redrive) == 0 {
		return res, nil
	}
	res.Redriven = keys
	r.Env.logf("%s: redriving %d processed messages from the DLQ", r.Name, len(redrive))
	for len(redrive) > 0 {
		n := min(10, len(redrive))
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, m := range redrive[:n] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
			if r.FIFO {
				// Behind the rest of its group, with a new deduplication ID: the old one may be
				// within its 5-minute window, and the copy would be dropped.
				entries[i].MessageGroupId = aws.String(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)])
				entries[i].MessageDeduplicationId = aws.String("redrive-" + aws.ToString(m.MessageId))
			}
		}
		if _, err := r.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.Queue.URL), Entries: entries}); err != nil {
			return res, fmt.Errorf("reliability: redrive: %w", err)
		}
		redrive = redrive[n:]
	}
	if err := r.drainQueue(ctx, wc, res); err != nil {
		return res, err
	}
	again, handles, err := r.readDLQ(ctx)
	if err != nil {
		return res, err
	}
	if len(again) > 0 {
		if !r.FIFO {
			_ = r.deleteAll(ctx, r.Queue.DLQURL, handles)
		}
		return res, fmt.Errorf("reliability: %d redriven messages went back to the DLQ", len(again))
	}
	return res, nil
}

// drainQueue runs a healthy worker until the queue is empty and stays so.
func (r *Run) drainQueue(ctx context.Context, wc WorkerConfig, res *DrainResult) error {
	for {
		res.Rounds++
		wc.ID = fmt.Sprintf("drain%d", res.Rounds)
		w, err := StartWorker(ctx, wc)
		if err != nil {
			return fmt.Errorf("reliability: start the drain worker: %w", err)
		}
		quiet := 0
		var last error
		for quiet < 3 {
			n, err := r.Count(ctx, r.Queue.URL)
			if err == nil && n == 0 {
				quiet++
			} else {
				quiet = 0
				last = err
			}
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				_ = w.Stop(context.WithoutCancel(ctx))
				if last != nil {
					return fmt.Errorf("reliability: the queue did not drain: %w (last count error: %w)", err, last)
				}
				return fmt.Errorf("reliability: the queue did not drain: %w", err)
			}
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err = w.Stop(sctx)
		cancel()
		if err != nil {
			return err
		}
		// Several consecutive empty receives of our own.
		empty := 0
		for empty < 3 {
			out, err := r.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.Queue.URL),
				MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				return fmt.Errorf("reliability: drain receive: %w", err)
			}
			if len(out.Messages) == 0 {
				empty++
				continue
			}
			for _, m := range out.Messages {
				_, _ = r.Client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(r.Queue.URL),
					ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
			}
			break
		}
		if empty == 3 {
			return nil
		}
	}
}

// readDLQ receives every message of the DLQ (holding them invisible) until several consecutive
// empty receives. A FIFO DLQ's messages are deleted as they are read instead: one held
// invisible would hide the rest of its group.
func (r *Run) readDLQ(ctx context.Context) ([]DLQMessage, []types.Message, error) {
	var out []DLQMessage
	var raw []types.Message
	seen := map[string]bool{}
	// Read until three consecutive empty receives and, on a server with exact counts (which
	// include the messages we hold), until the count matches what was read, for up to 150 s
	// more: a receive whose response was lost hides its messages for the visibility timeout
	// (120 s).
	deadline := time.Now().Add(150 * time.Second)
	for empty := 0; ; {
		if empty >= 3 {
			if !r.exactCounts || time.Now().After(deadline) {
				break
			}
			n, err := r.Count(ctx, r.Queue.DLQURL)
			if err != nil {
				return nil, nil, fmt.Errorf("reliability: count the DLQ: %w", err)
			}
			held := len(raw)
			if r.FIFO {
				held = 0
			}
			if n <= held {
				break
			}
			if r.dlqMismatch == "" {
				r.dlqMismatch = fmt.Sprintf("the DLQ's count said %d after %d were read and three receives came back empty", n, len(raw))
				r.Env.logf("%s: %s", r.Name, r.dlqMismatch)
			}
			empty = 0
		}
		res, err := r.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.Queue.DLQURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 120,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			return nil, nil, fmt.Errorf("reliability: read the DLQ: %w", err)
		}
		if len(res.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, m := range res.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				r.dlqDupIDs++
			}
			if seen[id] {
				continue
			}
			seen[id] = true
			info := infoOf(m)
			d := DLQMessage{Seq: info.seq, ID: id}
			if info.keyOK {
				d.Key = info.key
			}
			out = append(out, d)
			raw = append(raw, m)
		}
		if r.FIFO {
			if err := r.deleteAll(ctx, r.Queue.DLQURL, res.Messages); err != nil {
				return nil, nil, err
			}
		}
	}
	return out, raw, nil
}

func (r *Run) deleteAll(ctx context.Context, url string, msgs []types.Message) error {
	for len(msgs) > 0 {
		n := min(10, len(msgs))
		entries := make([]types.DeleteMessageBatchRequestEntry, n)
		for i, m := range msgs[:n] {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		if _, err := r.Client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			return fmt.Errorf("reliability: delete from the DLQ: %w", err)
		}
		msgs = msgs[n:]
	}
	return nil
}

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Queue is what the worker learned about its queue at start, from GetQueueAttributes.
type Queue struct {
	// URL is the queue's URL.
	URL string
	// Name is the queue's name (the last part of the URL).
	Name string
	// FIFO says whether it is a FIFO queue.
	FIFO bool
	// VisibilityTimeout is the queue's default visibility timeout.
	VisibilityTimeout time.Duration
	// MessageRetentionPeriod is how long the queue keeps a message.
	MessageRetentionPeriod time.Duration
	// DeadLetterTargetARN is the ARN of the dead-letter queue of the redrive policy, or empty.
	DeadLetterTargetARN string
	// MaxReceiveCount is the redrive policy's maxReceiveCount, or 0.
	MaxReceiveCount int
	// DeadLetterRetentionPeriod is the dead-letter queue's MessageRetentionPeriod, or 0 when there
	// is none or it could not be read.
	DeadLetterRetentionPeriod time.Duration
	// Attributes are all the attributes as returned.
	Attributes map[string]string
}

// RedeliveryHorizon is the longest time after which a message of this queue can be delivered
// again, counted from its send. An inbox must remember events at least this long.
//
// On a standard queue a message keeps its original enqueue time when it moves to the dead-letter
// queue, so the horizon is the longer of the two retention periods. On a FIFO queue the enqueue
// time restarts when the message moves to the dead-letter queue, so a message can live for up to
// the source's retention and then the DLQ's: the horizon is their sum. (A manual redrive from the
// DLQ back to the source can restart the clock once more; redrive within the inbox's retention.)
func (q *Queue) RedeliveryHorizon() time.Duration {
	if q.FIFO && q.DeadLetterTargetARN != "" {
		return q.MessageRetentionPeriod + q.DeadLetterRetentionPeriod
	}
	return max(q.MessageRetentionPeriod, q.DeadLetterRetentionPeriod)
}

// DeadLetterError is returned when a queue has a redrive policy but its dead-letter queue's
// retention cannot be read. Without it the redelivery horizon is unknown, so the worker refuses
// to start (unless Config.IgnoreDeadLetterRetention is set).
type DeadLetterError struct {
	// Queue is the source queue's name.
	Queue string
	// ARN is the dead-letter queue's ARN from the redrive policy.
	ARN string
	// Err is what the read failed with.
	Err error
}

func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("worker: queue %s: cannot read the retention of its dead-letter queue %s, so the redelivery horizon is unknown "+
		"(the consumer needs sqs:GetQueueUrl and sqs:GetQueueAttributes on the dead-letter queue; "+
		"or set Config.IgnoreDeadLetterRetention to check against the queue's own retention only): %v", e.Queue, e.ARN, e.Err)
}

func (e *DeadLetterError) Unwrap() error { return e.Err }

// QueueReader is the part of [SQSClient] that reads a queue's URL and attributes: what
// [DescribeQueue] needs, so that a tool that must change nothing can hold a client that cannot.
type QueueReader interface {
	GetQueueUrl(ctx context.Context, params *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// DescribeQueue reads what a worker learns about a queue at start: its attributes and, when it
// has a redrive policy, its dead-letter queue's retention. queue is a queue URL, or a name that
// is looked up with GetQueueUrl. A dead-letter queue whose retention cannot be read gives a
// *[DeadLetterError] (with the rest of the Queue filled in). Operators' tools use it to check a
// purge against [Queue.RedeliveryHorizon].
func DescribeQueue(ctx context.Context, client QueueReader, queue string, optFns ...func(*sqs.Options)) (*Queue, error) {
	url, name := queue, ""
	if !strings.Contains(queue, "/") {
		url, name = "", queue
	}
	opt := func(o *sqs.Options) {
		for _, f := range optFns {
			f(o)
		}
	}
	q, err := loadQueue(ctx, client, url, name, opt)
	if err != nil {
		return nil, err
	}
	if err := q.loadDeadLetter(ctx, client, opt); err != nil {
		return q, err
	}
	return q, nil
}

// loadDeadLetter reads the dead-letter queue's retention into q, if q has one.
func (q *Queue) loadDeadLetter(ctx context.Context, c QueueReader, opt func(*sqs.Options)) error {
	if q.DeadLetterTargetARN == "" {
		return nil
	}
	d, err := deadLetterRetention(ctx, c, q.DeadLetterTargetARN, opt)
	if err != nil {
		return &DeadLetterError{Queue: q.Name, ARN: q.DeadLetterTargetARN, Err: err}
	}
	q.DeadLetterRetentionPeriod = d
	return nil
}

func loadQueue(ctx context.Context, c QueueReader, url, name string, opt func(*sqs.Options)) (*Queue, error) {
	if url == "" {
		out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}, opt)
		if err != nil {
			return nil, fmt.Errorf("worker: look up the URL of queue %q: %w", name, err)
		}
		url = aws.ToString(out.QueueUrl)
	}
	attrs, err := queueAttributes(ctx, c, url, opt)
	if err != nil {
		return nil, err
	}
	q := &Queue{URL: url, Name: url[strings.LastIndexByte(url, '/')+1:], Attributes: attrs}
	q.FIFO = attrs[string(types.QueueAttributeNameFifoQueue)] == "true" || strings.HasSuffix(q.Name, ".fifo")
	q.VisibilityTimeout = seconds(attrs[string(types.QueueAttributeNameVisibilityTimeout)])
	q.MessageRetentionPeriod = seconds(attrs[string(types.QueueAttributeNameMessageRetentionPeriod)])
	if rp := attrs[string(types.QueueAttributeNameRedrivePolicy)]; rp != "" {
		arn, n, err := parseRedrivePolicy(rp)
		if err != nil {
			return nil, fmt.Errorf("worker: queue %s: %w", q.Name, err)
		}
		q.DeadLetterTargetARN, q.MaxReceiveCount = arn, n
	}
	return q, nil
}

func queueAttributes(ctx context.Context, c QueueReader, url string, opt func(*sqs.Options)) (map[string]string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	}, opt)
	if err != nil {
		return nil, fmt.Errorf("worker: read the attributes of queue %s: %w", url, err)
	}
	return out.Attributes, nil
}

// deadLetterRetention reads the retention of the queue named by arn, in the same account.
func deadLetterRetention(ctx context.Context, c QueueReader, arn string, opt func(*sqs.Options)) (time.Duration, error) {
	parts := strings.Split(arn, ":")
	if len(parts) < 6 {
		return 0, fmt.Errorf("worker: malformed dead-letter queue ARN %q", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := c.GetQueueUrl(ctx, in, opt)
	if err != nil {
		return 0, fmt.Errorf("worker: look up dead-letter queue %s: %w", parts[5], err)
	}
	attrs, err := queueAttributes(ctx, c, aws.ToString(out.QueueUrl), opt)
	if err != nil {
		return 0, err
	}
	return seconds(attrs[string(types.QueueAttributeNameMessageRetentionPeriod)]), nil
}

// parseRedrivePolicy reads a RedrivePolicy; maxReceiveCount may be a number or a string
// (GoAws returns a string).
func parseRedrivePolicy(s string) (arn string, maxReceive int, err error) {
	var rp struct {
		Target string          `json:"deadLetterTargetArn"`
		Max    json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &rp); err != nil {
		return "", 0, fmt.Errorf("malformed RedrivePolicy: %w", err)
	}
	m := strings.Trim(string(rp.Max), `"`)
	if m != "" {
		if maxReceive, err = strconv.Atoi(m); err != nil {
			return "", 0, fmt.Errorf("malformed RedrivePolicy maxReceiveCount %q", m)
		}
	}
	return rp.Target, maxReceive, nil
}

func seconds(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * time.Second
}

// errorCode returns the API error code of err, or "".
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// httpStatus returns the HTTP status of an error response, or 0.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// isGone reports whether err, from a call that names a message by its receipt handle, says the
// handle no longer names an in-flight message: it was deleted, or redelivered to someone else,
// or (GoAws) answered 404.
func isGone(err error, fifo bool) bool {
	return goneCode(errorCode(err), fifo) || httpStatus(err) == 404
}

// goneCode is isGone for an error code (also a batch entry's). On a FIFO queue SQS refuses a
// stale handle with InvalidParameterValue ("The receipt handle has expired"); that code is
// generic, so it counts as gone only there, and only for calls that name a message by handle.
func goneCode(code string, fifo bool) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
		"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "InvalidReceiptHandle", "NotFound":
		return true
	case "InvalidParameterValue":
		return fifo
	}
	return false
}

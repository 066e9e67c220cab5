package doctor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Visibility bounds past which the queue's visibility timeout costs more than it buys.
const (
	// minVisibility is the shortest visibility timeout that gives the heartbeat (every third of
	// it) room: below it, a pause of the process of a second or two loses the lease.
	minVisibility = 6 * time.Second
	// longVisibility is the visibility timeout past which a crashed worker's messages wait long
	// to be delivered again (the heartbeat covers long handlers; the timeout itself need not).
	longVisibility = 15 * time.Minute
)

// checkQueue reads the queue and its dead-letter queue and checks them against the worker's
// settings.
func (r *run) checkQueue(ctx context.Context) {
	r.checked("queue")
	name := r.cfg.Queue
	q, err := worker.DescribeQueue(ctx, r.deps.SQS, name)
	var dle *worker.DeadLetterError
	switch {
	case errors.As(err, &dle):
		r.add(Finding{Severity: Error, Check: "queue.dlq", Setting: "RedrivePolicy deadLetterTargetArn of " + q.Name,
			Seen: dle.ARN + ": " + oneLine(dle.Err), Want: "an existing queue the consumer can read",
			Fix: "create the dead-letter queue (terraform/modules/sqs-worker makes both), or point RedrivePolicy at one; " +
				"the consumer needs sqs:GetQueueUrl and sqs:GetQueueAttributes on it"})
	case err != nil:
		r.add(Finding{Severity: Error, Check: "queue.reachable", Setting: "queue " + name,
			Seen: oneLine(err), Want: "a queue these credentials can read (sqs:GetQueueUrl, sqs:GetQueueAttributes)",
			Fix: "check the queue's name or URL, AWS_REGION and the credentials' policy (terraform/modules/sqs-worker's consumer_policy_json)"})
		return
	}
	r.queue = q
	r.checkRedrive(ctx, q, dle != nil)
	r.checkVisibility(q)
	if dle == nil {
		r.checkRetention(q)
	}
	r.checkSize(q)
	r.checkEncryption(ctx, q)
}

// checkRedrive checks the redrive policy and the dead-letter queue.
func (r *run) checkRedrive(ctx context.Context, q *worker.Queue, dlqUnreadable bool) {
	if q.DeadLetterTargetARN == "" {
		r.add(Finding{Severity: Error, Check: "queue.redrive", Setting: "RedrivePolicy of " + q.Name,
			Seen: "none", Want: "a dead-letter queue and a maxReceiveCount",
			Fix: "terraform: redrive_policy (terraform/modules/sqs-worker sets it); or aws sqs set-queue-attributes --queue-url " + q.URL +
				` --attributes '{"RedrivePolicy":"{\"deadLetterTargetArn\":\"DLQ_ARN\",\"maxReceiveCount\":\"5\"}"}'; ` +
				"without one a failing message is retried until its retention ends, then lost"})
		return
	}
	switch n := q.MaxReceiveCount; {
	case n < DefaultMinMaxReceiveCount:
		r.add(Finding{Severity: Error, Check: "queue.max_receive_count", Setting: "RedrivePolicy maxReceiveCount of " + q.Name,
			Seen: strconv.Itoa(n), Want: fmt.Sprintf("at least %d", DefaultMinMaxReceiveCount),
			Fix: "terraform: max_receive_count (default 5); a consumer frozen holding an event's claim costs one delivery and " +
				"its blocked retry another, so fewer receives dead-letter events that were never applied"})
	case n > DefaultMaxMaxReceiveCount:
		r.add(Finding{Severity: Warning, Check: "queue.max_receive_count", Setting: "RedrivePolicy maxReceiveCount of " + q.Name,
			Seen: strconv.Itoa(n), Want: fmt.Sprintf("at most %d", DefaultMaxMaxReceiveCount),
			Fix: "terraform: max_receive_count (default 5); a poison message is received, and billed, this many times before the DLQ"})
	}
	if dlqUnreadable {
		return
	}
	dlq, err := r.describeARN(ctx, q.DeadLetterTargetARN)
	if err != nil && dlq == nil {
		r.add(Finding{Severity: Error, Check: "queue.dlq", Setting: "RedrivePolicy deadLetterTargetArn of " + q.Name,
			Seen: q.DeadLetterTargetARN + ": " + oneLine(err), Want: "an existing queue the consumer can read",
			Fix: "create the dead-letter queue, or point RedrivePolicy at one"})
		return
	}
	if dlq.FIFO != q.FIFO {
		r.add(Finding{Severity: Error, Check: "queue.dlq_kind", Setting: "FifoQueue of the DLQ " + dlq.Name,
			Seen: kind(dlq.FIFO), Want: kind(q.FIFO) + ", as the queue " + q.Name,
			Fix: "a FIFO queue's dead-letter queue must be FIFO and a standard queue's standard: terraform/modules/sqs-worker's fifo_queue makes both alike"})
	}
	if !q.FIFO && dlq.MessageRetentionPeriod <= q.MessageRetentionPeriod {
		r.add(Finding{Severity: Error, Check: "queue.dlq_retention", Setting: "MessageRetentionPeriod of the DLQ " + dlq.Name,
			Seen: days(dlq.MessageRetentionPeriod), Want: "longer than the queue's " + days(q.MessageRetentionPeriod),
			Fix: "a dead-lettered message keeps its original enqueue time on a standard queue, so it expires in the DLQ before anyone " +
				"redrives it; terraform: dlq_message_retention_seconds (default 1209600, 14 days), or aws sqs set-queue-attributes " +
				"--attributes MessageRetentionPeriod=1209600 on the DLQ"})
	}
	if qs, ds := q.Attributes["MaximumMessageSize"], dlq.Attributes["MaximumMessageSize"]; atoi(ds) < atoi(qs) && ds != "" {
		r.add(Finding{Severity: Error, Check: "queue.dlq_size", Setting: "MaximumMessageSize of the DLQ " + dlq.Name,
			Seen: ds, Want: "at least the queue's " + qs,
			Fix: "a message the queue took must fit in its DLQ; terraform/modules/sqs-worker gives both maximum_message_size"})
	}
}

// describeARN reads the queue an ARN names, in another account too (the start-up check of the
// worker resolves a dead-letter queue the same way).
func (r *run) describeARN(ctx context.Context, arn string) (*worker.Queue, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 {
		return nil, fmt.Errorf("malformed queue ARN %q", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := r.deps.SQS.GetQueueUrl(ctx, in)
	if err != nil {
		return nil, err
	}
	return worker.DescribeQueue(ctx, r.deps.SQS, aws.ToString(out.QueueUrl))
}

// checkVisibility checks the visibility timeout the worker will use against the handler's time.
func (r *run) checkVisibility(q *worker.Queue) {
	w := &r.cfg.Worker
	vis, setting := q.VisibilityTimeout, "VisibilityTimeout of "+q.Name
	if w.VisibilityTimeout > 0 {
		vis, setting = w.VisibilityTimeout, "the worker's Config.VisibilityTimeout"
	}
	switch {
	case vis < time.Second:
		r.add(Finding{Severity: Error, Check: "queue.visibility", Setting: setting, Seen: vis.String(), Want: "at least " + minVisibility.String(),
			Fix: "every message would be delivered again at once, and the worker refuses to start; terraform: visibility_timeout_seconds (default 30)"})
	case vis < minVisibility:
		r.add(Finding{Severity: Warning, Check: "queue.visibility", Setting: setting, Seen: vis.String(), Want: "at least " + minVisibility.String(),
			Fix: "the heartbeat extends every third of it, so a pause of the process of a second or two loses the lease and runs the message again; " +
				"terraform: visibility_timeout_seconds (default 30)"})
	case vis > longVisibility && (w.HandlerTimeout < 0 || vis > w.HandlerTimeout):
		r.add(Finding{Severity: Warning, Check: "queue.visibility", Setting: setting, Seen: vis.String(),
			Want: fmt.Sprintf("at most %v (the heartbeat keeps a longer handler's message invisible)", longVisibility),
			Fix:  "a crashed worker's messages wait this long before they are delivered again; terraform: visibility_timeout_seconds (default 30)"})
	}
	batch := max(w.HandlerBatch, 1)
	switch {
	case w.HandlerTimeout < 0:
		r.add(Finding{Severity: Warning, Check: "worker.handler_timeout", Setting: "the worker's Config.HandlerTimeout",
			Seen: "none", Want: "a bound under " + worker.MaxVisibility.String(),
			Fix: "a handler that hangs holds its message until SQS's 12-hour cap ends its lease; set Config.HandlerTimeout"})
	case time.Duration(batch)*w.HandlerTimeout > worker.MaxVisibility:
		r.add(Finding{Severity: Error, Check: "worker.handler_timeout", Setting: "the worker's Config.HandlerTimeout × Config.HandlerBatch",
			Seen: fmt.Sprintf("%v × %d", w.HandlerTimeout, batch), Want: "at most " + worker.MaxVisibility.String(),
			Fix: "a batch runs its messages one after another and cannot be kept invisible past SQS's 12-hour cap, so a slow batch " +
				"loses its lease, rolls back and runs again until the DLQ; lower Config.HandlerBatch or Config.HandlerTimeout"})
	}
}

// checkRetention checks the inbox's retention against the queue's redelivery horizon: the rule
// of [inbox.Inbox.CheckRetention], which the worker applies at start.
func (r *run) checkRetention(q *worker.Queue) {
	h := q.RedeliveryHorizon()
	if r.cfg.Inbox.Retention >= h {
		return
	}
	what := "the longer of the queue's and the DLQ's MessageRetentionPeriod"
	if q.FIFO && q.DeadLetterTargetARN != "" {
		what = "the queue's MessageRetentionPeriod plus the DLQ's (a FIFO message's age restarts in the DLQ)"
	}
	r.add(Finding{Severity: Error, Check: "queue.retention", Setting: "the inbox's retention against " + what,
		Seen: days(r.cfg.Inbox.Retention), Want: "at least " + days(h),
		Fix: "a redelivery after its inbox row was purged is applied twice, and the worker refuses to start; raise the inbox's retention " +
			"(inbox Config.Retention, --inbox-retention) or lower the queues' MessageRetentionPeriod"})
}

// checkSize checks the queue's MaximumMessageSize against the size producers offload over.
func (r *run) checkSize(q *worker.Queue) {
	s, ok := q.Attributes["MaximumMessageSize"]
	if !ok {
		return
	}
	if n := atoi(s); n < r.cfg.OffloadThreshold {
		r.add(Finding{Severity: Error, Check: "queue.message_size", Setting: "MaximumMessageSize of " + q.Name,
			Seen: s, Want: fmt.Sprintf("at least the offload threshold, %d", r.cfg.OffloadThreshold),
			Fix: "a message between the two sizes is neither offloaded nor accepted: the send fails (the outbox parks it); terraform: " +
				"maximum_message_size (default 262144), or lower the producers' s3payload WriterConfig.Threshold"})
	}
}

// checkEncryption checks that the queue is encrypted at rest.
func (r *run) checkEncryption(ctx context.Context, q *worker.Queue) {
	a := q.Attributes
	if key := a["KmsMasterKeyId"]; key != "" {
		r.checkKey(ctx, q, key)
		return
	}
	if a["SqsManagedSseEnabled"] == "true" {
		return
	}
	r.add(Finding{Severity: Warning, Check: "queue.encryption", Setting: "SqsManagedSseEnabled and KmsMasterKeyId of " + q.Name,
		Seen: "neither", Want: "SSE-SQS, or a KMS key the consumer may use (kms:Decrypt)",
		Fix: "terraform: sqs_managed_sse_enabled = true (terraform/modules/sqs-worker's default) or kms_key_arn; or aws sqs set-queue-attributes " +
			"--attributes SqsManagedSseEnabled=true"})
}

// checkKey checks that the queue's customer managed key is enabled: while it is not, SQS can
// neither take nor deliver the queue's messages (KMS.DisabledException, KMS.NotFoundException).
func (r *run) checkKey(ctx context.Context, q *worker.Queue, key string) {
	if r.deps.KMS == nil {
		return
	}
	setting := "KMS key " + key + " of " + q.Name
	out, err := r.deps.KMS.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(key)})
	if err != nil {
		r.add(Finding{Severity: Warning, Check: "queue.kms", Setting: setting,
			Seen: "not readable: " + oneLine(err), Want: "a key doctor may describe (kms:DescribeKey), to check its state",
			Fix: "grant kms:DescribeKey on the key to the role doctor runs as, or pass --no-kms; the consumer itself needs kms:Decrypt on it " +
				"(terraform/modules/sqs-worker's consumer policy grants it)"})
		return
	}
	md := out.KeyMetadata
	if md == nil || (md.Enabled && md.KeyState == kmstypes.KeyStateEnabled) {
		return
	}
	r.add(Finding{Severity: Error, Check: "queue.kms", Setting: setting,
		Seen: string(md.KeyState), Want: string(kmstypes.KeyStateEnabled),
		Fix: "while the key is not enabled SQS can neither take nor deliver the queue's messages; aws kms enable-key --key-id " + key +
			" (or aws kms cancel-key-deletion), or point kms_key_arn at an enabled key"})
}

func kind(fifo bool) string {
	if fifo {
		return "FIFO"
	}
	return "standard"
}

// days shows a duration in whole days when it is one, with its seconds (the unit SQS uses).
func days(d time.Duration) string {
	s := fmt.Sprintf("%ds", int64(d/time.Second))
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd (%s)", d/(24*time.Hour), s)
	}
	return d.String() + " (" + s + ")"
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// oneLine keeps an error to one line for a table cell.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

func runRedrive(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "redrive", "redrive --from DLQ [--to QUEUE] [--handler H [--dry-run]] [flags]",
		"  sqsinbox redrive --from warehouse-dlq --to warehouse\n"+
			"  sqsinbox redrive --from warehouse-dlq --to warehouse --mode copy --max 100\n"+
			"  sqsinbox redrive --from warehouse-dlq --to warehouse --handler warehouse --dry-run\n\n"+
			"With --handler, each message is first classified against the inbox (its key as the worker\n"+
			"takes it: the event_id attribute, else the body's \"id\", inside an SNS envelope too):\n"+
			"already applied by the handler (its effect committed; only its delete or a later copy\n"+
			"failed) is deleted from the DLQ (--keep-applied leaves it); never applied is moved back;\n"+
			"without a valid key it is left in the DLQ and reported. --dry-run only counts and shows\n"+
			"a sample of each class. A move is a copy first, then the delete: an interruption between\n"+
			"them leaves a duplicate, which the inbox absorbs; running it again resumes, and waits up to\n"+
			"70 s for the messages an interrupted run still hides (60 s each) to come back.\n\n"+
			"The move task (StartMessageMoveTask) is used where the server supports it, else each message\n"+
			"is received from the DLQ, sent to the queue with its body and attributes, then deleted.\n"+
			"The event key (the event_id attribute or the body) survives; the SQS MessageId does not.\n"+
			"A message the worker already processed is a duplicate on its return: the inbox deletes it.\n\n"+
			"A copy is a new message: its retention period starts again when it is sent, so it can be\n"+
			"delivered up to the queue's MessageRetentionPeriod after the copy, later than the original\n"+
			"could have been. Keep the inbox's retention (purge --older-than) above the time since the\n"+
			"events were first sent plus that period, or a copy of a purged event runs again.")
	from := fs.String("from", "", "the dead-letter queue, by name or URL (required)")
	to := fs.String("to", "", "the queue to move messages to, by name or URL (required in copy mode; the move task defaults to each message's source)")
	mode := fs.String("mode", "auto", "auto (move task, else copy), move-task, or copy")
	maxN := fs.Int("max", 0, "copy mode: move at most this many messages (0: until the DLQ is empty)")
	handler := fs.String("handler", "", "classify each message against this handler's inbox rows first (copy mode; needs the database)")
	dryRun := fs.Bool("dry-run", false, "with --handler: count and sample each class, change nothing")
	keepApplied := fs.Bool("keep-applied", false, "with --handler: leave messages already applied in the DLQ instead of deleting them")
	rate := fs.Float64("rate", 0, "copy mode: at most this many messages a second (0: no limit)")
	keyFlag := fs.String("key", "default", "with --handler: where the handler takes its event key, as its worker does: default (the event_id "+
		"attribute, else the body's \"id\"), attribute:NAME, json:FIELD, body (the SHA-256 of the body) or sns-message-id; "+
		"several, separated by commas, are tried in order")
	db.register(fs)
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if *from == "" {
		return fmt.Errorf("%w: --from is required", errUsage)
	}
	if *mode != "auto" && *mode != "move-task" && *mode != "copy" {
		return fmt.Errorf("%w: --mode %q: want auto, move-task or copy", errUsage, *mode)
	}
	switch {
	case *handler == "" && (*dryRun || *keepApplied || *keyFlag != "default"):
		return fmt.Errorf("%w: --dry-run, --keep-applied and --key need --handler", errUsage)
	case *handler != "" && *mode == "move-task":
		return fmt.Errorf("%w: --handler classifies message by message: it needs --mode copy (or auto)", errUsage)
	case *rate < 0:
		return fmt.Errorf("%w: --rate must not be negative", errUsage)
	}
	var cl *classifier
	if *handler != "" {
		*mode = "copy"
		if err := inbox.ValidateHandler(*handler); err != nil {
			return fmt.Errorf("%w: --handler: %w", errUsage, err)
		}
		if err := sqlident.Validate("--schema", db.schema); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		ib, closeDB, err := db.openInbox(ctx, fs.timeout)
		if err != nil {
			return err
		}
		defer closeDB()
		if cl, err = db.newClassifier(ctx, ib, *handler, *dryRun, *keepApplied); err != nil {
			return err
		}
		if cl.key, err = parseKeyFlag(*keyFlag); err != nil {
			return err
		}
	}
	if *mode == "copy" && *to == "" {
		return fmt.Errorf("%w: --mode copy needs --to", errUsage)
	}
	c, err := sqsClient(ctx, fs.timeout)
	if err != nil {
		return err
	}
	fromURL, err := queueURL(ctx, c, *from)
	if err != nil {
		return err
	}
	toURL := ""
	if *to != "" {
		if toURL, err = queueURL(ctx, c, *to); err != nil {
			return err
		}
	}
	if *mode != "copy" {
		err := moveTask(ctx, e, c, fromURL, toURL)
		switch {
		case err == nil:
			return nil
		case !unsupported(err):
			return fmt.Errorf("move task: %s", apiError(err))
		case *mode == "move-task":
			return fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
				"use --mode copy (with --to), or --mode auto to fall back to it", sqsEndpoint(c))
		case toURL == "":
			return fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
				"give --to to copy message by message instead", sqsEndpoint(c))
		}
		fmt.Fprintf(e.stderr, "the SQS server has no message move tasks (StartMessageMoveTask); copying message by message\n")
	}
	return copyMessages(ctx, e, c, fromURL, toURL, *maxN, *rate, cl)
}

// unsupported tells "this server does not have the API" from a real failure.
func unsupported(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "InvalidAction", "UnsupportedOperation", "UnknownOperationException", "InvalidParameterValue", "NotImplemented":
			return true
		}
	}
	// GoAws answers an unknown action with plain text, which the SDK cannot deserialise.
	var de *smithy.DeserializationError
	return errors.As(err, &de)
}

func moveTask(ctx context.Context, e env, c *sqs.Client, fromURL, toURL string) error {
	attrs, err := attributes(ctx, c, fromURL)
	if err != nil {
		return err
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(attrs["QueueArn"])}
	if toURL != "" {
		ta, err := attributes(ctx, c, toURL)
		if err != nil {
			return err
		}
		in.DestinationArn = aws.String(ta["QueueArn"])
	}
	out, err := c.StartMessageMoveTask(ctx, in)
	if err != nil {
		return err
	}
	handle := aws.ToString(out.TaskHandle)
	p := newProgress(e.stderr)
	defer p.done()
	for {
		lt, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: in.SourceArn, MaxResults: aws.Int32(1)})
		if err != nil {
			if ctx.Err() != nil {
				// Stop the server-side task too: what moved stays moved, the rest stays in the DLQ.
				_, cerr := c.CancelMessageMoveTask(context.WithoutCancel(ctx), &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
				return errors.Join(ctx.Err(), cerr)
			}
			return fmt.Errorf("list move tasks: %s", apiError(err))
		}
		if len(lt.Results) > 0 {
			r := lt.Results[0]
			moved, total := r.ApproximateNumberOfMessagesMoved, aws.ToInt64(r.ApproximateNumberOfMessagesToMove)
			p.update("move task %s: %d of %d moved", aws.ToString(r.Status), moved, total)
			switch aws.ToString(r.Status) {
			case "COMPLETED":
				p.done()
				fmt.Fprintf(e.stdout, "moved %s from %s (move task)\n", plural(int(moved), "message"), lastPart(fromURL))
				return nil
			case "FAILED", "CANCELLED":
				return fmt.Errorf("move task %s after %d messages: %s", aws.ToString(r.Status), moved, aws.ToString(r.FailureReason))
			}
		}
		if err := sleepUntil(ctx, time.Now().Add(time.Second)); err != nil {
			_, cerr := c.CancelMessageMoveTask(context.WithoutCancel(ctx), &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
			return errors.Join(err, cerr)
		}
	}
}

// copyMessages moves messages one receive batch at a time: send to the queue, then delete from
// the DLQ. An interrupt lets the batch in hand finish, so no message is sent without its delete
// being attempted. If a delete fails after the send, the message is in both queues; the next
// redrive sends it again and the inbox treats the second copy as a duplicate.
func copyMessages(ctx context.Context, e env, c *sqs.Client, fromURL, toURL string, maxN int, rate float64, cl *classifier) error {
	p := newProgress(e.stderr)
	defer p.done()
	moved, empty := 0, 0
	var left []string // receipt handles of the messages left in the DLQ, made visible again at the end
	defer func() {
		for _, h := range left {
			_, _ = c.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(fromURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
		}
	}()
	pace := newPacer(rate)
	limit := queueMaxBytes(ctx, c, toURL, e.stderr) // a copy over it would be refused: left, and said
	tooBig := 0
	seen := map[string]bool{} // the messages this run has handled, by MessageId
	var heldSince time.Time   // when this run first found messages in flight in an empty-looking DLQ
	fifo := len(toURL) > 5 && toURL[len(toURL)-5:] == ".fifo"
	for empty < 2 && (maxN == 0 || moved < maxN) {
		if ctx.Err() != nil {
			p.done()
			fmt.Fprintf(e.stdout, "interrupted: moved %s from %s to %s as copies: their retention period starts again\n",
				plural(moved, "message"), lastPart(fromURL), lastPart(toURL))
			return ctx.Err()
		}
		n := int32(10)
		if maxN > 0 {
			n = int32(min(10, maxN-moved))
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(fromURL),
			MaxNumberOfMessages:         n,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(redriveHold / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("receive from %s: %s", lastPart(fromURL), apiError(err))
		}
		if len(out.Messages) == 0 || allSeen(seen, out.Messages) {
			// Empty, or only messages this run left in the DLQ, visible again after a long run.
			empty++
			if empty == 2 && waitHeld(ctx, e, c, fromURL, len(left), &heldSince, p) {
				empty = 0
			}
			continue
		}
		empty = 0
		// The batch in hand is finished even if an interrupt arrives now.
		bctx := context.WithoutCancel(ctx)
		for _, m := range out.Messages {
			if seen[aws.ToString(m.MessageId)] {
				left = append(left, aws.ToString(m.ReceiptHandle)) // left once already, and counted
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			if err := pace.wait(ctx); err != nil {
				left = append(left, aws.ToString(m.ReceiptHandle))
				continue
			}
			if size := messageBytes(m); size > limit {
				left = append(left, aws.ToString(m.ReceiptHandle))
				tooBig++
				if cl != nil {
					cl.count(classLeave, aws.ToString(m.MessageId), fmt.Sprintf("%d bytes, over %s's MaximumMessageSize of %d", size, lastPart(toURL), limit))
				}
				continue
			}
			if cl != nil {
				switch cl.classify(bctx, m) {
				case classLeave:
					left = append(left, aws.ToString(m.ReceiptHandle))
					continue
				case classApplied:
					if cl.dryRun || cl.keepApplied {
						left = append(left, aws.ToString(m.ReceiptHandle))
						continue
					}
					if _, err := c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(fromURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
						return fmt.Errorf("delete an applied message from %s: %s", lastPart(fromURL), apiError(err))
					}
					p.update("%s", cl.progress())
					continue
				case classMove:
					if cl.dryRun {
						left = append(left, aws.ToString(m.ReceiptHandle))
						continue
					}
				}
			}
			in := &sqs.SendMessageInput{
				QueueUrl:          aws.String(toURL),
				MessageBody:       m.Body,
				MessageAttributes: m.MessageAttributes,
			}
			if fifo {
				in.MessageGroupId = aws.String(m.Attributes["MessageGroupId"])
				in.MessageDeduplicationId = aws.String(redriveDedupID(m))
			}
			if _, err := c.SendMessage(bctx, in); err != nil {
				return fmt.Errorf("send to %s after moving %d: %s (the message stays in the DLQ)", lastPart(toURL), moved, apiError(err))
			}
			if _, err := c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(fromURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return fmt.Errorf("delete from %s after sending: %s (the message is now in both queues; the inbox deduplicates it)", lastPart(fromURL), apiError(err))
			}
			moved++
			if cl != nil {
				p.update("%s", cl.progress())
			} else {
				p.update("moved %d messages", moved)
			}
		}
	}
	p.done()
	if cl != nil {
		cl.report(e.stdout, fromURL, toURL)
		if cl.dryRun {
			return nil
		}
	}
	fmt.Fprintf(e.stdout, "moved %s from %s to %s as copies: their retention period starts again now\n",
		plural(moved, "message"), lastPart(fromURL), lastPart(toURL))
	if tooBig > 0 && cl == nil {
		fmt.Fprintf(e.stdout, "left %s in %s: over %s's MaximumMessageSize of %d bytes\n", plural(tooBig, "message"), lastPart(fromURL),
			lastPart(toURL), limit)
	}
	return nil
}

// redriveDedupID is the MessageDeduplicationId of a FIFO message's copy: derived from its
// original one and its MessageId in the DLQ, not the original itself. SQS drops, without an
// error, a message whose deduplication id the queue saw in the last 5 minutes: a copy carrying
// the original id, made within 5 minutes of the original send, would be dropped and then deleted
// from the DLQ, lost. The derived id is the same for every copy of one DLQ message, so a copy
// sent again after an interrupted run (in the 5 minutes) is deduplicated; past them, the inbox
// absorbs it.
func redriveDedupID(m types.Message) string {
	h := sha256.New()
	for _, p := range []string{"sqsinbox/redrive/v1", m.Attributes["MessageDeduplicationId"], aws.ToString(m.MessageId)} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// messageBytes is a message's size as SQS counts it against MaximumMessageSize: its body and each
// attribute's name, type and value.
func messageBytes(m types.Message) int {
	n := len(aws.ToString(m.Body))
	for name, a := range m.MessageAttributes {
		n += len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

// redriveHold is how long a redrive's receive hides a message from other receivers; heldWait is
// how long a run waits for messages another receiver holds, which covers a hold of an interrupted
// redrive: running again after a kill resumes and finishes in one go.
const (
	redriveHold = 60 * time.Second
	heldWait    = redriveHold + 10*time.Second
)

// waitHeld is called when the DLQ looks empty. When it still counts messages in flight besides
// the own run holds (received by another consumer, or by an interrupted redrive), it waits a
// little for them to come back and returns true, up to heldWait from the first time; then it says
// how many were left behind and returns false.
func waitHeld(ctx context.Context, e env, c *sqs.Client, url string, own int, since *time.Time, p *progress) bool {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return false
	}
	held, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	held -= own
	if held <= 0 {
		return false
	}
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > heldWait {
		p.done()
		fmt.Fprintf(e.stderr, "%s of %s still in flight, held by another receiver: run again once they are visible\n",
			plural(held, "message"), lastPart(url))
		return false
	}
	p.update("waiting up to %v for %s in flight (held by another receiver, such as an interrupted redrive)",
		heldWait.Round(time.Second), plural(held, "message"))
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}

// class is what redrive --handler does with a dead-lettered message.
type class int

const (
	classMove    class = iota // never applied by the handler: back to the queue
	classApplied              // already applied: its effect committed; delete it from the DLQ
	classLeave                // no valid key (or the inbox could not be asked): left in the DLQ
)

// classifier sorts a DLQ's messages against the inbox rows of one handler, and counts them.
type classifier struct {
	ib                  *inbox.Inbox
	handler             string
	key                 inboxhandler.KeyFunc // the handler's key; nil is inboxhandler.DefaultKey
	dryRun, keepApplied bool
	counts              [3]int
	samples             [3][]string
	why                 map[string]int // why messages were left, by reason
}

// newClassifier returns the classifier of `redrive --handler` (and of the console's redrive) for
// handler, a valid handler name. One lookup first names an unmigrated schema at once, rather than
// as the reason every message is left in the DLQ.
func (db *dbFlags) newClassifier(ctx context.Context, ib *inbox.Inbox, handler string, dryRun, keepApplied bool) (*classifier, error) {
	if _, err := ib.Lookup(ctx, "sqsinbox-redrive-probe"); err != nil {
		return nil, db.inboxError(err)
	}
	return &classifier{ib: ib, handler: handler, dryRun: dryRun, keepApplied: keepApplied}, nil
}

// sampleSize is how many keys of each class the report shows.
const sampleSize = 3

// messageKey is a received message's event key as the worker takes it: the event_id attribute,
// else the body's "id", inside an SNS envelope too.
func messageKey(m types.Message) (string, error) { return messageKeyWith(m, inboxhandler.DefaultKey) }

// messageKeyWith is messageKey with the handler's own key function.
func messageKeyWith(m types.Message, key inboxhandler.KeyFunc) (string, error) {
	wm := &worker.Message{ID: aws.ToString(m.MessageId), Body: []byte(aws.ToString(m.Body)),
		Attributes: m.MessageAttributes, SystemAttributes: m.Attributes}
	if err := worker.UnwrapSNS(wm, worker.SNSAuto); err != nil {
		return "", err
	}
	return key(wm)
}

// parseKeyFlag reads --key: the key functions of inboxhandler, by name, tried in order. The SQS
// MessageId is not among them: a moved copy gets a new one, so a handler keyed by it would run
// the copy again whatever the inbox says.
func parseKeyFlag(v string) (inboxhandler.KeyFunc, error) {
	var fns []inboxhandler.KeyFunc
	for part := range strings.SplitSeq(v, ",") {
		kind, arg, _ := strings.Cut(strings.TrimSpace(part), ":")
		switch {
		case kind == "default" && arg == "":
			fns = append(fns, inboxhandler.DefaultKey)
		case kind == "attribute" && arg != "":
			fns = append(fns, inboxhandler.KeyFromAttribute(arg))
		case kind == "json" && arg != "":
			fns = append(fns, inboxhandler.KeyFromJSONField(arg))
		case kind == "body" && arg == "":
			fns = append(fns, inboxhandler.KeyFromBody)
		case kind == "sns-message-id" && arg == "":
			fns = append(fns, inboxhandler.KeyFromSNSMessageID)
		default:
			return nil, fmt.Errorf("%w: --key %q: %q is not default, attribute:NAME, json:FIELD, body or sns-message-id "+
				"(the SQS MessageId cannot be: a moved copy gets a new one)", errUsage, v, part)
		}
	}
	if len(fns) == 1 {
		return fns[0], nil
	}
	return inboxhandler.FirstKey(fns...), nil
}

func (cl *classifier) classify(ctx context.Context, m types.Message) class {
	keyFn := cl.key
	if keyFn == nil {
		keyFn = inboxhandler.DefaultKey
	}
	key, err := messageKeyWith(m, keyFn)
	if err != nil {
		return cl.count(classLeave, aws.ToString(m.MessageId), "no valid key: "+err.Error())
	}
	found, err := cl.ib.Lookup(ctx, key)
	if err != nil {
		return cl.count(classLeave, key, "the inbox could not be asked: "+err.Error())
	}
	for _, p := range found {
		if p.Handler == cl.handler {
			return cl.count(classApplied, key, "")
		}
	}
	return cl.count(classMove, key, "")
}

func (cl *classifier) count(c class, sample, why string) class {
	cl.counts[c]++
	if len(cl.samples[c]) < sampleSize {
		cl.samples[c] = append(cl.samples[c], sample)
	}
	if why != "" {
		if cl.why == nil {
			cl.why = map[string]int{}
		}
		cl.why[firstLine(why)]++
	}
	return c
}

func (cl *classifier) progress() string {
	return fmt.Sprintf("%d to move, %d already applied, %d left", cl.counts[classMove], cl.counts[classApplied], cl.counts[classLeave])
}

// report prints the counts of each class, a sample of each, and why messages were left.
func (cl *classifier) report(w io.Writer, fromURL, toURL string) {
	verb := map[bool]string{true: "would be", false: "were"}[cl.dryRun]
	applied := "deleted from the DLQ"
	if cl.keepApplied {
		applied = "left in the DLQ (--keep-applied)"
	}
	fmt.Fprintf(w, "%s against handler %s's inbox rows%s:\n", lastPart(fromURL), cl.handler, map[bool]string{true: " (dry run: nothing changed)", false: ""}[cl.dryRun])
	fmt.Fprintf(w, "  never applied: %d (%s moved to %s) %v\n", cl.counts[classMove], verb, lastPart(toURL), cl.samples[classMove])
	fmt.Fprintf(w, "  already applied: %d (%s %s) %v\n", cl.counts[classApplied], verb, applied, cl.samples[classApplied])
	fmt.Fprintf(w, "  left in the DLQ: %d %v\n", cl.counts[classLeave], cl.samples[classLeave])
	for _, why := range slices.Sorted(maps.Keys(cl.why)) {
		fmt.Fprintf(w, "    %d: %s\n", cl.why[why], why)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// pacer spaces calls to at most rate a second (no limit when rate is 0).
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return &pacer{}
	}
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

func (p *pacer) wait(ctx context.Context) error {
	if p.every == 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(p.every)
	return sleepUntil(ctx, at)
}

func allSeen(seen map[string]bool, msgs []types.Message) bool {
	for _, m := range msgs {
		if !seen[aws.ToString(m.MessageId)] {
			return false
		}
	}
	return true
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

func runRedrive(ctx context.Context, e env, args []string) error {
	fs, o := redriveFlags(e)
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if err := o.check(words); err != nil {
		return err
	}
	cl, closeDB, err := o.classifier(ctx, e, fs.timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	if cl != nil {
		o.mode = "copy"
	}
	if o.mode == "copy" && o.to == "" {
		return fmt.Errorf("%w: --mode copy needs --to", errUsage)
	}
	c, err := sqsClient(ctx, fs.timeout)
	if err != nil {
		return err
	}
	fromURL, err := queueURL(ctx, c, o.from)
	if err != nil {
		return err
	}
	toURL := ""
	if o.to != "" {
		if toURL, err = queueURL(ctx, c, o.to); err != nil {
			return err
		}
	}
	if o.mode != "copy" {
		if done, err := tryMoveTask(ctx, e, c, fromURL, toURL, o.mode); done || err != nil {
			return err
		}
	}
	return copyMessages(ctx, e, c, fromURL, toURL, o.maxN, o.rate, cl)
}

// redriveOptions are redrive's flags.
type redriveOptions struct {
	db                                                    dbFlags
	cf                                                    classifyFlags
	from, to, mode, handler, typeAttr, typeField, keyFlag string
	routes                                                stringList
	maxN                                                  int
	rate                                                  float64
	dryRun, keepApplied, allowOld, unclassified           bool
	set                                                   map[string]bool // the flags given
}

// redriveFlags is redrive's flag set, and the options its flags set.
func redriveFlags(e env) (*flags, *redriveOptions) {
	o := &redriveOptions{set: map[string]bool{}}
	fs := newFlags(e, "redrive", "redrive --from DLQ [--to QUEUE] [--handler H | --route TYPE=H... | --unclassified] [--dry-run] [flags]",
		"  sqsinbox redrive --from warehouse-dlq --to warehouse\n"+
			"  sqsinbox redrive --from warehouse-dlq --to warehouse --mode copy --max 100\n"+
			"  sqsinbox redrive --from warehouse-dlq --to warehouse --handler warehouse --dry-run\n"+
			"  sqsinbox redrive --from orders-dlq --to orders --route OrderPaid=orders-paid --route OrderShipped=orders-shipped\n"+
			"  DATABASE_URL=... sqsinbox redrive --from orders-dlq --to orders --dry-run   # by the routes its worker published\n\n"+
			"With --handler, each message is first classified against the inbox (its key as the worker\n"+
			"takes it: the event_id attribute, else the body's \"id\", inside an SNS envelope too, from the\n"+
			"payload fetched from S3 where it is offloaded): already applied by the handler (its effect\n"+
			"committed; only its delete or a later copy failed) is deleted from the DLQ (--keep-applied\n"+
			"leaves it); never applied is moved back; without a valid key it is left in the DLQ and\n"+
			"reported. --dry-run only counts and shows a sample of each class. A move is a copy first, then\n"+
			"the delete: an interruption between them leaves a duplicate, which the inbox absorbs; running\n"+
			"it again resumes, and waits up to 70 s for the messages an interrupted run still hides (60 s\n"+
			"each) to come back.\n\n"+
			"A queue served by an inboxhandler.Router has a handler per type, and the same id under two\n"+
			"types is two events. Its worker publishes its routes in the inbox when it starts (where the\n"+
			"type is read, each type's handler): with the database (--database-url or DATABASE_URL) and\n"+
			"neither --handler nor --route, redrive classifies by the routes published for the --to queue,\n"+
			"and says which version. --route TYPE=HANDLER (one per type) and --type-attribute/--type-field\n"+
			"override them; --unclassified moves every message as it is. A message whose type has no\n"+
			"route is left. With --handler alone, a message that carries a type, or whose type cannot be\n"+
			"read, is never deleted: it is moved (the type is read as the published routes say).\n\n"+
			"The move task (StartMessageMoveTask) is used where the server supports it, else each message\n"+
			"is received from the DLQ, sent to the queue with its body and attributes, then deleted.\n"+
			"The event key (the event_id attribute or the body) survives, and so does the MessageGroupId (a\n"+
			"FIFO group, or on a standard queue a fair queue's tenant); the SQS MessageId does not.\n"+
			"A message the worker already processed is a duplicate on its return: the inbox deletes it.\n\n"+
			"A copy is a new message: its retention period starts again when it is sent, so it can be\n"+
			"delivered up to the queue's MessageRetentionPeriod after the copy, later than the original\n"+
			"could have been. Keep the inbox's retention (purge --older-than) above the time since the\n"+
			"events were first sent plus that period, or a copy of a purged event runs again; a classified\n"+
			"redrive leaves a message older than --inbox-retention less that period (--allow-old moves it).")
	fs.StringVar(&o.from, "from", "", "the dead-letter queue, by name or URL (required)")
	fs.StringVar(&o.to, "to", "", "the queue to move messages to, by name or URL (required in copy mode; the move task defaults to each message's source)")
	fs.StringVar(&o.mode, "mode", "auto", "auto (move task, else copy), move-task, or copy")
	fs.IntVar(&o.maxN, "max", 0, "copy mode: handle at most this many messages, each moved, deleted as applied or left counting "+
		"(in a dry run, each classified); the redrive stops receiving there (0: until the DLQ is empty)")
	fs.StringVar(&o.handler, "handler", "", "classify each message against this handler's inbox rows first (copy mode; needs the database)")
	fs.Var(&o.routes, "route", "TYPE=HANDLER (repeatable): classify each message against the handler its type routes to, as an "+
		"inboxhandler.Router does; a message whose type has no route is left in the DLQ (instead of --handler)")
	fs.StringVar(&o.typeAttr, "type-attribute", "type", "the message attribute that names a message's type (RouterConfig.TypeAttribute; "+
		"default: as the queue's worker published it, else type)")
	fs.StringVar(&o.typeField, "type-field", "", "the body's top-level field read when the attribute is absent (RouterConfig.TypeField; "+
		"default: as the queue's worker published it, else the body is not read)")
	fs.BoolVar(&o.unclassified, "unclassified", false, "move every message as it is, without classifying it by the routes its queue's worker published")
	fs.BoolVar(&o.dryRun, "dry-run", false, "classified (--handler, --route or the published routes): count and sample each class, change nothing")
	fs.BoolVar(&o.keepApplied, "keep-applied", false, "classified: leave messages already applied in the DLQ instead of deleting them")
	fs.BoolVar(&o.allowOld, "allow-old", false, "classified: move messages even when their copy could outlive their inbox row (see --inbox-retention)")
	fs.Float64Var(&o.rate, "rate", 0, "copy mode: at most this many messages a second (0: no limit)")
	fs.StringVar(&o.keyFlag, "key", "default", "classified: where the handlers take their event key, as their worker does: default (the event_id "+
		"attribute, else the body's \"id\"), attribute:NAME, json:FIELD, body (the SHA-256 of the body) or sns-message-id; "+
		"several, separated by commas, are tried in order")
	o.db.register(fs)
	o.cf.register(fs)
	return fs, o
}

// classified reports whether messages are classified against the inbox (--handler or --route).
func (o *redriveOptions) classified() bool { return o.handler != "" || len(o.routes) > 0 }

// check checks the words and the flags that go together, before anything is opened.
func (o *redriveOptions) check(words []string) error {
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if o.from == "" {
		return fmt.Errorf("%w: --from is required", errUsage)
	}
	if o.mode != "auto" && o.mode != "move-task" && o.mode != "copy" {
		return fmt.Errorf("%w: --mode %q: want auto, move-task or copy", errUsage, o.mode)
	}
	classified := o.classified()
	switch {
	case !classified && o.needsClassifier() && !o.byPublished():
		return o.unclassifiedError()
	case o.unclassified && classified:
		return fmt.Errorf("%w: --unclassified moves every message unclassified: give it without --handler and --route", errUsage)
	case o.handler != "" && len(o.routes) > 0:
		return fmt.Errorf("%w: give --handler (a queue with one handler) or --route TYPE=HANDLER (a router's queue, one per type), not both", errUsage)
	case classified && o.mode == "move-task":
		return fmt.Errorf("%w: --handler (or --route) classifies message by message: it needs --mode copy (or auto)", errUsage)
	case o.maxN < 0:
		return fmt.Errorf("%w: --max must not be negative", errUsage)
	case o.rate < 0:
		return fmt.Errorf("%w: --rate must not be negative", errUsage)
	}
	return nil
}

// needsClassifier reports whether a flag that only a classified redrive reads was given.
func (o *redriveOptions) needsClassifier() bool {
	return o.dryRun || o.keepApplied || o.allowOld || o.set["key"] || o.set["type-field"] || o.set["type-attribute"] ||
		o.set["payload-buckets"] || o.set["payload-max-bytes"] || o.set["inbox-retention"]
}

func (o *redriveOptions) unclassifiedError() error {
	return fmt.Errorf("%w: --dry-run, --keep-applied, --key, --allow-old, --type-*, --payload-* and --inbox-retention need --handler or --route, "+
		"or the routes the --to queue's worker published (read from the database, --database-url or DATABASE_URL; not with --unclassified or --mode move-task)", errUsage)
}

// byPublished reports whether the messages are to be classified by the routes the --to queue's
// worker published, if it published any: no --handler or --route, a destination, copy mode
// possible, and a database named.
func (o *redriveOptions) byPublished() bool {
	return !o.classified() && !o.unclassified && o.to != "" && o.mode != "move-task" && (o.db.url != "" || os.Getenv("DATABASE_URL") != "")
}

// classifier opens the inbox and returns the classifier of --handler or --route, or of the
// routes the --to queue's worker published; nil (and a line on stderr saying why) when the
// messages are not classified. closeDB closes the inbox.
func (o *redriveOptions) classifier(ctx context.Context, e env, timeout time.Duration) (cl *classifier, closeDB func(), err error) {
	if !o.classified() && !o.byPublished() {
		if !o.unclassified && o.to != "" && o.mode != "move-task" {
			fmt.Fprintf(e.stderr, "no database (--database-url or DATABASE_URL): the messages are moved unclassified, "+
				"not by the routes the queue's worker published\n")
		}
		return nil, func() {}, nil
	}
	cc := classifierConfig{handler: o.handler, types: inboxhandler.RouterConfig{TypeAttribute: o.typeAttr, TypeField: o.typeField},
		allowOld: o.allowOld, dryRun: o.dryRun, keepApplied: o.keepApplied}
	if o.handler != "" {
		if err := inbox.ValidateHandler(o.handler); err != nil {
			return nil, nil, fmt.Errorf("%w: --handler: %w", errUsage, err)
		}
	}
	if cc.routes, err = parseRoutes(o.routes); err != nil {
		return nil, nil, fmt.Errorf("--route: %w", err)
	}
	if cc.key, err = parseKeyFlag(o.keyFlag); err != nil {
		return nil, nil, err
	}
	if cc.retention, err = o.cf.inboxRetention(); err != nil {
		return nil, nil, err
	}
	if err := sqlident.Validate("--schema", o.db.schema); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if cc.payloads, err = o.cf.payloadReader(ctx, e.getenv, timeout); err != nil {
		return nil, nil, err
	}
	ib, closeDB, err := o.db.openInbox(ctx, timeout)
	if err != nil {
		return nil, nil, err
	}
	if o.to != "" {
		p, err := o.published(ctx, e, ib)
		if err == nil && p == nil && !o.classified() {
			closeDB()
			if o.needsClassifier() {
				return nil, nil, o.unclassifiedError()
			}
			return nil, func() {}, nil
		}
		if err == nil {
			err = cc.usePublished(p, o.set["type-attribute"] || o.set["type-field"])
		}
		if err != nil {
			closeDB()
			return nil, nil, err
		}
	}
	if cl, err = o.db.newClassifier(ctx, ib, cc); err != nil {
		closeDB()
		return nil, nil, err
	}
	return cl, closeDB, nil
}

// published returns the routes the --to queue's worker published, or nil when it published none
// or the schema predates them: without --handler or --route, the messages are then moved
// unclassified, and a line on stderr says why; with them, the type is read as the flags say.
func (o *redriveOptions) published(ctx context.Context, e env, ib *inbox.Inbox) (*inbox.PublishedRoutes, error) {
	queue := lastPart(o.to)
	then := "every message is moved unclassified (--handler or --route classifies it)"
	p, err := ib.PublishedRoutes(ctx, queue)
	switch {
	case o.classified() && (p == nil || errors.Is(err, inbox.ErrNotMigrated)):
		return nil, nil // --handler or --route, on a queue of no router's: nothing to say
	case o.classified() && err != nil:
		fmt.Fprintf(e.stderr, "the routes published for queue %s could not be read (%s): the type is read as --type-attribute and --type-field say\n",
			queue, oneLine(err))
		return nil, nil
	case errors.Is(err, inbox.ErrNotMigrated):
		fmt.Fprintf(e.stderr, "schema %s has no routes table (run `sqsinbox migrate up`): %s\n", o.db.schema, then)
		return nil, nil
	case err != nil:
		return nil, err
	case p == nil:
		fmt.Fprintf(e.stderr, "no routes published for queue %s in schema %s (a worker whose handler is an inboxhandler.Router or Handler publishes "+
			"them when it starts): %s\n", queue, o.db.schema, then)
	}
	return p, nil
}

// tryMoveTask runs the move task of --mode auto or move-task. done is false when the server has
// no move tasks and mode auto falls back to copying, which it says on stderr.
func tryMoveTask(ctx context.Context, e env, c *sqs.Client, fromURL, toURL, mode string) (done bool, err error) {
	err = moveTask(ctx, e, c, fromURL, toURL)
	switch {
	case err == nil:
		return true, nil
	case !unsupported(err):
		return true, fmt.Errorf("move task: %s", apiError(err))
	case mode == "move-task":
		return true, fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
			"use --mode copy (with --to), or --mode auto to fall back to it", sqsEndpoint(c))
	case toURL == "":
		return true, fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
			"give --to to copy message by message instead", sqsEndpoint(c))
	}
	fmt.Fprintf(e.stderr, "the SQS server has no message move tasks (StartMessageMoveTask); copying message by message\n")
	return false, nil
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
// redrive sends it again and the inbox treats the second copy as a duplicate. maxN (0: no bound)
// bounds the messages handled, each moved, deleted or left (in a dry run, each classified): the
// run receives no more than that. On a FIFO DLQ, a message left in it holds back the rest of its
// group for the run, so that none of them overtakes it.
func copyMessages(ctx context.Context, e env, c *sqs.Client, fromURL, toURL string, maxN int, rate float64, cl *classifier) error {
	p := newProgress(e.stderr)
	defer p.done()
	cp := &copier{e: e, c: c, fromURL: fromURL, toURL: toURL, maxN: maxN, cl: cl, p: p, pace: newPacer(rate),
		seen: map[string]bool{}, held: map[string]bool{},
		fifo: strings.HasSuffix(toURL, ".fifo"), fifoFrom: strings.HasSuffix(fromURL, ".fifo")}
	defer cp.release(ctx)
	cp.limit = queueMaxBytes(ctx, c, toURL, e.stderr) // a copy over it would be refused: left, and said
	if cl != nil {
		cl.destination(ctx, c, toURL, e.stderr)
	}
	empty := 0
	for empty < 2 && (maxN == 0 || cp.handled < maxN) {
		if ctx.Err() != nil {
			p.done()
			fmt.Fprintf(e.stdout, "interrupted: moved %s from %s to %s as copies: their retention period starts again\n",
				plural(cp.moved, "message"), lastPart(fromURL), lastPart(toURL))
			return ctx.Err()
		}
		msgs, err := cp.receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return err
		}
		if len(msgs) == 0 || allSeen(cp.seen, msgs) {
			// Empty, or only messages this run left in the DLQ, visible again after a long run.
			empty++
			if empty == 2 && waitHeld(ctx, e, c, fromURL, len(cp.left), &cp.heldSince, p) {
				empty = 0
			}
			continue
		}
		empty = 0
		// The batch in hand is finished even if an interrupt arrives now.
		bctx := context.WithoutCancel(ctx)
		for _, m := range msgs {
			if err := cp.handle(ctx, bctx, m); err != nil {
				return err
			}
		}
	}
	p.done()
	cp.report()
	return nil
}

// copier is copyMessages's state: the queues, the counts, and the messages it leaves in the DLQ.
type copier struct {
	e              env
	c              *sqs.Client
	fromURL, toURL string
	maxN           int
	cl             *classifier // nil: every message moves
	p              *progress
	pace           *pacer
	limit          int // the queue's MaximumMessageSize
	fifo, fifoFrom bool

	moved, handled, tooBig, behind int
	left                           []string        // receipt handles of the messages left in the DLQ, made visible again at the end
	seen                           map[string]bool // the messages this run has handled, by MessageId
	held                           map[string]bool // FIFO groups with a message left in the DLQ: the rest of each stays too
	heldSince                      time.Time       // when this run first found messages in flight in an empty-looking DLQ
}

// release makes the messages left in the DLQ visible again.
func (cp *copier) release(ctx context.Context) {
	for _, h := range cp.left {
		_, _ = cp.c.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(cp.fromURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
	}
}

// receive receives the next batch from the DLQ, no more than --max leaves to handle.
func (cp *copier) receive(ctx context.Context) ([]types.Message, error) {
	n := int32(10)
	if cp.maxN > 0 {
		n = int32(min(10, cp.maxN-cp.handled))
	}
	out, err := cp.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(cp.fromURL),
		MaxNumberOfMessages:         n,
		WaitTimeSeconds:             1,
		VisibilityTimeout:           int32(redriveHold / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %s", lastPart(cp.fromURL), apiError(err))
	}
	return out.Messages, nil
}

// keep leaves m in the DLQ.
func (cp *copier) keep(m types.Message) {
	cp.left = append(cp.left, aws.ToString(m.ReceiptHandle))
}

// leave keeps m in the DLQ; on a FIFO DLQ its group's later messages stay behind it.
func (cp *copier) leave(m types.Message) {
	cp.keep(m)
	if cp.fifoFrom {
		cp.held[m.Attributes["MessageGroupId"]] = true
	}
}

// handle moves m, deletes it as applied, or leaves it in the DLQ. ctx paces; bctx, which an
// interrupt does not end, carries the calls that act on m.
func (cp *copier) handle(ctx, bctx context.Context, m types.Message) error {
	id := aws.ToString(m.MessageId)
	if cp.seen[id] || (cp.maxN > 0 && cp.handled >= cp.maxN) {
		cp.keep(m) // left once already, and counted; or past --max
		return nil
	}
	cp.seen[id] = true
	if cp.pace.wait(ctx) != nil { // interrupted: the rest of the batch stays, and the receive loop ends on ctx
		cp.keep(m)
		return nil //nolint:nilerr // the interrupt is the loop's to see, not an error of m
	}
	cp.handled++
	if cp.stays(m) {
		return nil
	}
	if cp.cl != nil {
		if done, err := cp.classified(bctx, m); done || err != nil {
			return err
		}
	}
	return cp.move(bctx, m)
}

// stays leaves m in the DLQ, counted, when it is behind a message of its FIFO group left there
// or over the queue's MaximumMessageSize, and reports whether it did.
func (cp *copier) stays(m types.Message) bool {
	id, group := aws.ToString(m.MessageId), m.Attributes["MessageGroupId"]
	if cp.fifoFrom && cp.held[group] {
		cp.leave(m)
		cp.behind++
		if cp.cl != nil {
			cp.cl.count(classLeave, id, "behind a message of its FIFO group left in the DLQ: moved, it would overtake it")
		}
		return true
	}
	if size := messageBytes(m); size > cp.limit {
		cp.leave(m)
		cp.tooBig++
		if cp.cl != nil {
			cp.cl.count(classLeave, id, fmt.Sprintf("%d bytes, over %s's MaximumMessageSize of %d", size, lastPart(cp.toURL), cp.limit))
		}
		return true
	}
	return false
}

// classified acts on the classifier's class of m: it leaves m, deletes it as applied, or, in a
// dry run, only counts it. done is false when m is to be moved.
func (cp *copier) classified(bctx context.Context, m types.Message) (done bool, err error) {
	cl := cp.cl
	switch cl.classify(bctx, m) {
	case classLeave:
		cp.leave(m)
		return true, nil
	case classApplied:
		if cl.dryRun || cl.keepApplied {
			cp.keep(m) // applied already: its group may go on
			return true, nil
		}
		if _, err := cp.c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(cp.fromURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			return true, fmt.Errorf("delete an applied message from %s: %s", lastPart(cp.fromURL), apiError(err))
		}
		cp.p.update("%s", cl.progress())
		return true, nil
	case classMove:
		if cl.dryRun {
			cp.keep(m)
			return true, nil
		}
	}
	return false, nil
}

// move sends a copy of m to the queue, then deletes m from the DLQ. The copy keeps m's
// MessageGroupId on every queue, not only on a FIFO one: on a standard queue it is the tenant of
// SQS's fair queues, which the worker's MaxPerGroup counts, and a copy without it would run as
// nobody's message.
func (cp *copier) move(bctx context.Context, m types.Message) error {
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(cp.toURL),
		MessageBody:       m.Body,
		MessageAttributes: m.MessageAttributes,
	}
	if g := m.Attributes["MessageGroupId"]; g != "" || cp.fifo {
		in.MessageGroupId = aws.String(g)
	}
	if cp.fifo {
		in.MessageDeduplicationId = aws.String(redriveDedupID(m))
	}
	if _, err := cp.c.SendMessage(bctx, in); err != nil {
		return fmt.Errorf("send to %s after moving %d: %s (the message stays in the DLQ)", lastPart(cp.toURL), cp.moved, apiError(err))
	}
	if _, err := cp.c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(cp.fromURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return fmt.Errorf("delete from %s after sending: %s (the message is now in both queues; the inbox deduplicates it)", lastPart(cp.fromURL), apiError(err))
	}
	cp.moved++
	if cp.cl != nil {
		cp.p.update("%s", cp.cl.progress())
	} else {
		cp.p.update("moved %d messages", cp.moved)
	}
	return nil
}

// report says what the run did: the classifier's report, or the count moved and the ones left.
func (cp *copier) report() {
	from, to, out := lastPart(cp.fromURL), lastPart(cp.toURL), cp.e.stdout
	if cp.cl != nil {
		cp.cl.report(out, cp.fromURL, cp.toURL)
		if cp.cl.dryRun {
			return
		}
	}
	fmt.Fprintf(out, "moved %s from %s to %s as copies: their retention period starts again now\n", plural(cp.moved, "message"), from, to)
	if cp.cl == nil && cp.tooBig > 0 {
		fmt.Fprintf(out, "left %s in %s: over %s's MaximumMessageSize of %d bytes\n", plural(cp.tooBig, "message"), from, to, cp.limit)
	}
	if cp.cl == nil && cp.behind > 0 {
		fmt.Fprintf(out, "left %s in %s: behind a message of their FIFO group left there\n", plural(cp.behind, "message"), from)
	}
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

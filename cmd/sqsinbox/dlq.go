package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// discardHold is how long a discard hides the messages it receives while it looks for the ones
// named. Those it does not delete are made visible again as soon as it has looked (the hold only
// matters if it is killed before).
const discardHold = 30 * time.Second

// discardScan bounds how long a discard looks for the messages named.
const discardScan = 30 * time.Second

func runDLQ(ctx context.Context, e env, args []string) error {
	var (
		db    dbFlags
		o     discardOptions
		peekN int
	)
	fs := newFlags(e, "dlq", "dlq peek --from DLQ [--max N] | dlq discard --from DLQ --reason WHY [--by WHO] [--force] MESSAGE_ID... [flags]",
		"  sqsinbox dlq peek --from warehouse-dlq\n"+
			"  sqsinbox dlq discard --from warehouse-dlq --reason \"test order, refunded by hand\" 6f1c8a52-...\n\n"+
			"peek receives up to --max messages of the dead-letter queue and makes them visible again at\n"+
			"once (it raises their receive counts), and shows each with its key and, from the inbox (when\n"+
			"--database-url or DATABASE_URL is given), the failures its handlers recorded (the newest:\n"+
			"handler, receive count, error; --json: all of them, whole).\n\n"+
			"discard deletes the messages named by their SQS message id, and nothing else. SQS deletes only\n"+
			"by receipt handle, so it receives from the DLQ until it has seen every message named (or for\n"+
			"30 s), hiding each message it receives for at most 30 s; every message it does not delete is\n"+
			"made visible again as soon as it has looked. Each deletion is recorded first in the inbox's\n"+
			"dlq_discards table: who (--by, default $USER), why (--reason, required), the message id, its\n"+
			"key and the SHA-256 of its body. A message whose event no handler has applied (or that has no\n"+
			"valid key) is refused: deleting it loses the event. --force discards it anyway.\n"+
			"It exits 1 when a message named was refused or not found, after discarding the others.")
	db.register(fs)
	fs.StringVar(&o.from, "from", "", "the dead-letter queue, by name or URL (required)")
	fs.IntVar(&peekN, "max", 10, "peek: how many messages to receive (1 to 10, one receive)")
	fs.StringVar(&o.reason, "reason", "", "discard (required): why the messages are discarded, recorded with them")
	fs.StringVar(&o.by, "by", "", "discard: who discards them, recorded with them (default $USER)")
	fs.BoolVar(&o.force, "force", false, "discard: discard also a message whose event no handler applied (it is lost)")
	keyFlag := fs.String("key", "default", "where the handlers take their event key, as their worker does (as redrive's --key)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: want peek or discard", errUsage)
	}
	if o.from == "" {
		return fmt.Errorf("%w: --from is required (the dead-letter queue)", errUsage)
	}
	if err := sqlident.Validate("--schema", db.schema); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	ks, err := parseKeyFlag(*keyFlag)
	if err != nil {
		return fmt.Errorf("%w: --key: %w", errUsage, err)
	}
	o.key = ks.fn
	switch words[0] {
	case "peek":
		if len(words) != 1 {
			return fmt.Errorf("%w: peek takes no argument, got %q", errUsage, words[1])
		}
		if peekN < 1 || peekN > 10 {
			return fmt.Errorf("%w: --max %d: want 1 to 10 (one receive)", errUsage, peekN)
		}
	case "discard":
		o.ids = words[1:]
		if err := o.check(e.getenv); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: unknown action %q: want peek or discard", errUsage, words[0])
	}
	c, err := sqsClient(ctx, fs.timeout)
	if err != nil {
		return err
	}
	url, err := queueURL(ctx, c, o.from)
	if err != nil {
		return err
	}
	var ib *inbox.Inbox
	if words[0] == "discard" || db.url != "" || os.Getenv("DATABASE_URL") != "" {
		var closeDB func()
		if ib, closeDB, err = db.openInbox(ctx, fs.timeout); err != nil {
			return err
		}
		defer closeDB()
	}
	if words[0] == "peek" {
		return db.inboxError(peekCommand(ctx, e, c, ib, url, peekN, o.key, *asJSON))
	}
	rep, err := discardMessages(ctx, c, ib, url, o)
	if err != nil {
		return db.inboxError(err)
	}
	rep.write(e.stdout, lastPart(url))
	return rep.err()
}

// peekCommand is `dlq peek`: one receive, released at once, each message shown with its key and
// recorded failures (none when ib is nil: no database given).
func peekCommand(ctx context.Context, e env, c *sqs.Client, ib *inbox.Inbox, url string, n int, key inboxhandler.KeyFunc, asJSON bool) error {
	msgs, err := peekDLQ(ctx, c, url, n)
	if err != nil {
		return err
	}
	fails, err := dlqFailures(ctx, ib, msgs, key)
	if err != nil {
		return err
	}
	type shown struct {
		ID       string          `json:"message_id"`
		Key      string          `json:"event_id,omitempty"`
		KeyErr   string          `json:"key_error,omitempty"`
		Receives int             `json:"receive_count"`
		Sent     time.Time       `json:"sent"`
		Body     string          `json:"body"`
		Failures []inbox.Failure `json:"failures"`
	}
	out := make([]shown, 0, len(msgs))
	for _, m := range msgs {
		s := shown{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), Failures: fails[aws.ToString(m.MessageId)]}
		if s.Failures == nil {
			s.Failures = []inbox.Failure{}
		}
		s.Receives, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
			s.Sent = time.UnixMilli(ms).UTC()
		}
		if k, err := messageKeyWith(m, key); err != nil {
			s.KeyErr = errorList(err)
		} else {
			s.Key = k
		}
		out = append(out, s)
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(map[string]any{"queue": lastPart(url), "messages": out})
	}
	fmt.Fprintf(e.stdout, "%s received from %s and made visible again", plural(len(out), "message"), lastPart(url))
	if ib == nil {
		fmt.Fprint(e.stdout, " (no database given: no failures shown)")
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "MESSAGE\tKEY\tRECEIVES\tSENT\tFAILURES\tLAST FAILURE\n")
	for _, s := range out {
		last := "-"
		if len(s.Failures) > 0 {
			f := s.Failures[0]
			last = fmt.Sprintf("%s, receive %d, %s: %s", f.Handler, f.ReceiveCount, f.FailedAt.UTC().Format(time.RFC3339), shortError(f.Error))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", s.ID, cmp.Or(s.Key, "(no valid key)"), s.Receives, s.Sent.Format(time.RFC3339), len(s.Failures), last)
	}
	return tw.Flush()
}

// peekDLQ receives up to n messages of the DLQ url, hidden for peekVisibility seconds at most,
// and makes them visible again at once; it never deletes.
func peekDLQ(ctx context.Context, c *sqs.Client, url string, n int) ([]types.Message, error) {
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             1,
		VisibilityTimeout:           peekVisibility,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("peek at %s: %s", lastPart(url), apiError(err))
	}
	release(ctx, c, url, out.Messages)
	return out.Messages, nil
}

// release makes msgs visible again at once. A release that fails leaves the message hidden until
// its visibility timeout ends.
func release(ctx context.Context, c *sqs.Client, url string, msgs []types.Message) {
	rctx := context.WithoutCancel(ctx)
	for _, m := range msgs {
		_, _ = c.ChangeMessageVisibility(rctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
	}
}

// dlqFailures are the recorded failures of each of msgs, by message id, the newest first: those
// recorded under its message id (SQS keeps the id when it dead-letters a message), else those of
// its event key (a message that was copied, and so has a new id). None when ib is nil.
func dlqFailures(ctx context.Context, ib *inbox.Inbox, msgs []types.Message, key inboxhandler.KeyFunc) (map[string][]inbox.Failure, error) {
	if ib == nil || len(msgs) == 0 {
		return nil, nil
	}
	ids, keys := make([]string, 0, len(msgs)), make([]string, 0, len(msgs))
	keyOf := map[string]string{}
	for _, m := range msgs {
		id := aws.ToString(m.MessageId)
		ids = append(ids, id)
		if k, err := messageKeyWith(m, key); err == nil {
			keys = append(keys, k)
			keyOf[id] = k
		}
	}
	fs, err := ib.Failures(ctx, keys, ids)
	if err != nil {
		return nil, err
	}
	byID := map[string][]inbox.Failure{}
	for _, id := range ids {
		for _, f := range fs {
			if f.MessageID == id {
				byID[id] = append(byID[id], f)
			}
		}
		if len(byID[id]) == 0 && keyOf[id] != "" {
			for _, f := range fs {
				if f.EventID == keyOf[id] {
					byID[id] = append(byID[id], f)
				}
			}
		}
	}
	return byID, nil
}

// discardOptions are what a discard deletes, and the record it leaves.
type discardOptions struct {
	from       string
	ids        []string
	by, reason string
	force      bool
	key        inboxhandler.KeyFunc
}

// check checks the options of a discard before anything is opened; by defaults to $USER.
func (o *discardOptions) check(getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	if len(o.ids) == 0 {
		return fmt.Errorf("%w: discard takes the message ids to delete (the MESSAGE column of dlq peek)", errUsage)
	}
	seen := map[string]bool{}
	for _, id := range o.ids {
		if strings.TrimSpace(id) == "" || len(id) > 128 {
			return fmt.Errorf("%w: message id %q: want an SQS message id", errUsage, id)
		}
		if seen[id] {
			return fmt.Errorf("%w: message id %s is named twice", errUsage, id)
		}
		seen[id] = true
	}
	if strings.TrimSpace(o.reason) == "" {
		return fmt.Errorf("%w: --reason is required: say why the messages are discarded (it is recorded with them)", errUsage)
	}
	o.by = cmp.Or(strings.TrimSpace(o.by), strings.TrimSpace(getenv("USER")))
	if o.by == "" {
		return fmt.Errorf("%w: --by is required when $USER is not set: say who discards the messages", errUsage)
	}
	if o.key == nil {
		o.key = inboxhandler.DefaultKey
	}
	return nil
}

// discardReport is what a discard did with each message named.
type discardReport struct {
	discarded []string // "id (event K, applied by H)"
	refused   []string // "id: why"
	failed    []string // "id: why": the deletion or its record failed
	notFound  []string
}

func (r *discardReport) write(w io.Writer, queue string) {
	for _, s := range r.discarded {
		fmt.Fprintf(w, "discarded %s\n", s)
	}
	for _, s := range r.refused {
		fmt.Fprintf(w, "refused %s\n", s)
	}
	for _, s := range r.failed {
		fmt.Fprintf(w, "not discarded %s\n", s)
	}
	for _, s := range r.notFound {
		fmt.Fprintf(w, "not found %s: not in %s, or in flight (received by someone else) while this looked\n", s, queue)
	}
	fmt.Fprintf(w, "%s discarded from %s; %d refused, %d failed, %d not found\n", plural(len(r.discarded), "message"), queue,
		len(r.refused), len(r.failed), len(r.notFound))
}

// err is the discard's error: nil when every message named was discarded.
func (r *discardReport) err() error {
	if n := len(r.refused) + len(r.failed) + len(r.notFound); n > 0 {
		return fmt.Errorf("%s of %d not discarded (see above)", plural(n, "message"), n+len(r.discarded))
	}
	return nil
}

// discardMessages deletes the messages o.ids from the DLQ url, and only those: it receives until
// it has seen each (or for discardScan, or until the DLQ has nothing more to give), hiding each
// message received for discardHold at most, and makes every message it does not delete visible
// again as soon as it stops looking. Each deletion is recorded in the inbox first; should the
// delete fail, the record is removed again. A message whose event no handler applied is refused
// unless o.force.
func discardMessages(ctx context.Context, c *sqs.Client, ib *inbox.Inbox, url string, o discardOptions) (*discardReport, error) {
	rep := &discardReport{}
	want := map[string]bool{}
	for _, id := range o.ids {
		want[id] = true
	}
	var others []types.Message
	defer func() { release(ctx, c, url, others) }()
	seen := map[string]bool{}
	deadline := time.Now().Add(discardScan)
	for empty := 0; len(want) > 0 && empty < 2 && time.Now().Before(deadline); {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(discardHold / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return rep, fmt.Errorf("receive from %s: %s", lastPart(url), apiError(err))
		}
		if len(out.Messages) == 0 || allSeen(seen, out.Messages) {
			empty++
		} else {
			empty = 0
		}
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			seen[id] = true
			if !want[id] {
				others = append(others, m)
				continue
			}
			delete(want, id)
			if keep := discardOne(ctx, c, ib, url, m, o, rep); keep {
				others = append(others, m)
			}
		}
	}
	for _, id := range o.ids {
		if want[id] {
			rep.notFound = append(rep.notFound, id)
		}
	}
	return rep, nil
}

// discardOne deletes m, named by the operator, unless its event no handler applied and o.force is
// not set; it reports whether m stays in the DLQ (to be made visible again).
func discardOne(ctx context.Context, c *sqs.Client, ib *inbox.Inbox, url string, m types.Message, o discardOptions, rep *discardReport) (keep bool) {
	id := aws.ToString(m.MessageId)
	key, kerr := messageKeyWith(m, o.key)
	var applied []string
	if kerr == nil {
		found, err := ib.Lookup(ctx, key)
		if err != nil {
			rep.failed = append(rep.failed, fmt.Sprintf("%s: looking up event %s: %s", id, key, oneLine(err)))
			return true
		}
		for _, p := range found {
			applied = append(applied, p.Handler)
		}
	}
	var what string
	switch {
	case kerr != nil:
		what = "no valid key: " + oneLine(kerr)
	case len(applied) == 0:
		what = "event " + key + ", applied by no handler"
	default:
		what = "event " + key + ", applied by " + strings.Join(applied, ", ")
	}
	if len(applied) == 0 && !o.force {
		rep.refused = append(rep.refused, fmt.Sprintf("%s (%s): deleting it loses the event; --force discards it anyway", id, what))
		return true
	}
	bctx := context.WithoutCancel(ctx) // the record and the delete finish together, or are undone
	rec, err := ib.RecordDiscard(bctx, inbox.Discard{Queue: lastPart(url), MessageID: id, EventID: key, Body: aws.ToString(m.Body),
		By: o.by, Reason: o.reason, Forced: len(applied) == 0})
	if err != nil {
		rep.failed = append(rep.failed, fmt.Sprintf("%s: %s", id, oneLine(err)))
		return true
	}
	if _, err := c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		_ = ib.ForgetDiscard(bctx, rec)
		rep.failed = append(rep.failed, fmt.Sprintf("%s: delete: %s", id, apiError(err)))
		return true
	}
	if len(applied) == 0 {
		what += ", forced"
	}
	rep.discarded = append(rep.discarded, fmt.Sprintf("%s (%s)", id, what))
	return false
}

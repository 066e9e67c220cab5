package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

func runStats(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "stats", "stats [flags]",
		"  sqsinbox stats                              # inbox rows per handler, the outbox's backlog ($DATABASE_URL)\n"+
			"  sqsinbox stats --queue warehouse            # and the queue's depth, in flight, its DLQ's, and the oldest ages\n"+
			"  sqsinbox stats --no-db --no-age --queue https://sqs.eu-west-1.amazonaws.com/123456789012/warehouse\n\n"+
			"The age of the oldest message is CloudWatch's ApproximateAgeOfOldestMessage (AWS/SQS, the\n"+
			"maximum per minute, the newest in the last 15 minutes; AWS_ENDPOINT_URL_CLOUDWATCH overrides\n"+
			"the endpoint). If CloudWatch fails or gives no answer within 5 s, the table is shown anyway\n"+
			"with the age unavailable and one line on stderr saying why. --no-age skips the call.\n\n"+
			"The outbox part shows its unsent messages, the age of the oldest, and its parked messages\n"+
			"with the last --parked of them and their errors; a schema without the outbox says so in one line.")
	db.register(fs)
	queue := fs.String("queue", "", "a queue name or URL to report on")
	noDB := fs.Bool("no-db", false, "report on the queue only")
	noAge := fs.Bool("no-age", false, "do not ask CloudWatch for the age of the oldest message")
	parked := fs.Int("parked", 5, "how many of the outbox's parked messages to list, the last parked first (0: only their count)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if *parked < 0 {
		return fmt.Errorf("%w: --parked must not be negative", errUsage)
	}
	if *noDB && *queue == "" {
		return fmt.Errorf("%w: --no-db needs --queue", errUsage)
	}
	if !*noDB {
		if err := sqlident.Validate("--schema", db.schema); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if err := inboxStats(ctx, e, &db, fs.timeout, *parked); err != nil {
			return err
		}
	}
	if *queue != "" {
		return queueStats(ctx, e, *queue, !*noAge, fs.timeout)
	}
	return nil
}

func inboxStats(ctx context.Context, e env, db *dbFlags, timeout time.Duration, parked int) error {
	ib, closeDB, err := db.openInbox(ctx, timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := ib.Stats(ctx)
	if err != nil {
		return db.inboxError(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "HANDLER\tROWS\tOLDEST SEEN\tNEWEST SEEN\n")
	for _, h := range st.Handlers {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", h.Handler, h.Rows, h.Oldest.UTC().Format(time.RFC3339), h.Newest.UTC().Format(time.RFC3339))
	}
	if len(st.Handlers) == 0 {
		fmt.Fprintf(tw, "(no rows)\t\t\t\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "purge horizon at the default retention (%s): rows seen before %s\n",
		durationText(inbox.DefaultRetention), st.PurgeHorizon.UTC().Format(time.RFC3339))
	return outboxStats(ctx, e, ib.Pool(), db.schema, parked)
}

// queueStats prints the queue's counts and its DLQ's and, when withAge is set, the age of each
// one's oldest message from CloudWatch. A CloudWatch failure does not fail the command: the
// counts are still right, so the age is shown as unavailable with one line saying why.
func queueStats(ctx context.Context, e env, q string, withAge bool, timeout time.Duration) error {
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return err
	}
	c := newSQS(cfg, timeout)
	url, err := queueURL(ctx, c, q)
	if err != nil {
		return err
	}
	attrs, err := attributes(ctx, c, url)
	if err != nil {
		return err
	}
	names := []string{lastPart(url)}
	all := []map[string]string{attrs}
	arn := dlqARN(attrs["RedrivePolicy"])
	if arn != "" {
		dlqURL, err := urlFromARN(ctx, c, arn)
		if err != nil {
			return err
		}
		da, err := attributes(ctx, c, dlqURL)
		if err != nil {
			return err
		}
		names = append(names, lastPart(dlqURL))
		all = append(all, da)
	}
	var (
		ages   []queueAge
		ageErr error
	)
	if withAge {
		ages, ageErr = oldestAges(ctx, cfg, names)
		if ageErr != nil && ctx.Err() != nil {
			return ageErr
		}
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nQUEUE\tVISIBLE\tIN FLIGHT\tDELAYED\tRETENTION")
	if withAge {
		fmt.Fprintf(tw, "\tOLDEST AGE")
	}
	fmt.Fprintln(tw)
	for i, a := range all {
		name := names[i]
		if i == 1 {
			name += " (DLQ)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", name, a["ApproximateNumberOfMessages"],
			a["ApproximateNumberOfMessagesNotVisible"], a["ApproximateNumberOfMessagesDelayed"],
			secondsText(a["MessageRetentionPeriod"]))
		switch {
		case !withAge:
		case ageErr != nil:
			fmt.Fprintf(tw, "\tunavailable")
		default:
			fmt.Fprintf(tw, "\t%s", ages[i].text())
		}
		fmt.Fprintln(tw)
	}
	if arn == "" {
		fmt.Fprintf(tw, "(no redrive policy: failing messages are retried until the retention ends, then lost)\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ageErr != nil {
		fmt.Fprintf(e.stderr, "sqsinbox stats: oldest age unavailable: %s\n", ageUnavailable(ageErr))
	}
	return nil
}

func attributes(ctx context.Context, c *sqs.Client, url string) (map[string]string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("queue %s: %s", lastPart(url), apiError(err))
	}
	return out.Attributes, nil
}

// dlqARN takes deadLetterTargetArn out of a RedrivePolicy without caring whether
// maxReceiveCount is a number or (as GoAws writes it) a string.
func dlqARN(policy string) string {
	const k = `"deadLetterTargetArn"`
	i := strings.Index(policy, k)
	if i < 0 {
		return ""
	}
	rest := policy[i+len(k):]
	a := strings.IndexByte(rest, '"')
	if a < 0 {
		return ""
	}
	b := strings.IndexByte(rest[a+1:], '"')
	if b < 0 {
		return ""
	}
	return rest[a+1 : a+1+b]
}

// urlFromARN resolves arn:aws:sqs:region:account:name to the queue's URL.
func urlFromARN(ctx context.Context, c *sqs.Client, arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[2] != "sqs" {
		return "", fmt.Errorf("%q is not an SQS queue ARN", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("queue %s: %s", parts[5], apiError(err))
	}
	return aws.ToString(out.QueueUrl), nil
}

func lastPart(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

func secondsText(s string) string {
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		return s
	}
	return durationText(d)
}

// openInbox connects to the database and opens the inbox in --schema; close ends the pool.
func (db *dbFlags) openInbox(ctx context.Context, timeout time.Duration) (ib *inbox.Inbox, closeDB func(), err error) {
	pool, err := db.connect(ctx, timeout)
	if err != nil {
		return nil, nil, err
	}
	ib, err = inbox.New(pool, &inbox.Config{Schema: db.schema})
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return ib, pool.Close, nil
}

// inboxError says how to fix an inbox's missing table.
func (db *dbFlags) inboxError(err error) error {
	if errors.Is(err, inbox.ErrNotMigrated) {
		return fmt.Errorf("%s.processed_messages does not exist (is the schema migrated?): run `sqsinbox migrate up`", db.schema)
	}
	return err
}

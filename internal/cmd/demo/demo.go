package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/pgtest"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// The queue the demo uses: the warehouse example's, as localstack/ and terraform/ create it.
const (
	queueName       = "warehouse"
	dlqName         = "warehouse-dlq"
	maxReceiveCount = 5
	retention       = 4 * 24 * time.Hour
	dlqRetention    = 14 * 24 * time.Hour
	visibility      = 30 * time.Second
	concurrency     = 20
)

// The event of the story.
const (
	storyEvent = "evt_9f3k"
	storyOrder = "ord_7731"
)

func run(ctx context.Context, o options) (err error) {
	start := time.Now()
	out := o.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while %s; everything started was stopped", what)
		}
		return fmt.Errorf("%s: %w", what, err)
	}

	// PostgreSQL.
	dbURL, dbDesc := os.Getenv("DATABASE_URL"), "DATABASE_URL"
	if dbURL == "" {
		say("Starting PostgreSQL (a throwaway cluster from the local binaries)...")
		db, err := pgtest.Start(ctx, "demo")
		if err != nil {
			return fail("starting PostgreSQL", err)
		}
		defer db.Close()
		dbURL, dbDesc = db.URL, "throwaway cluster"
		if !db.Owned() {
			dbDesc = "a fresh database on TEST_DATABASE_URL"
		}
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = concurrency + 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail("connecting to PostgreSQL", err)
	}
	defer pool.Close()
	var pgVersion string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion); err != nil {
		return fail("connecting to PostgreSQL", err)
	}
	dbDesc = "PostgreSQL " + strings.Fields(pgVersion)[0] + " (" + dbDesc + ")"

	// SQS.
	sqsDesc := "AWS_ENDPOINT_URL_SQS=" + os.Getenv("AWS_ENDPOINT_URL_SQS")
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		say("Starting GoAws %s (built from the Go module proxy on first use)...", sqstest.GoAwsVersion)
		sqsDesc = "GoAws " + sqstest.GoAwsVersion + " (started here)"
	}
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return fail("starting the SQS server", err)
	}
	defer func() {
		if srv.GoAws && os.Getenv("SQSINBOX_TEST_GOAWS") == "1" && strings.HasPrefix(sqsDesc, "GoAws") {
			// sqstest pointed this process's AWS environment at the GoAws it started: undo that.
			_ = os.Unsetenv("AWS_ENDPOINT_URL_SQS")
			_ = os.Unsetenv("SQSINBOX_TEST_GOAWS")
		}
		srv.Close()
	}()
	if !srv.GoAws && os.Getenv("AWS_ENDPOINT_URL_SQS") == "" {
		sqsDesc = "AWS_ENDPOINT_URL=" + os.Getenv("AWS_ENDPOINT_URL")
	}
	client := srv.Client()
	queueURL, dlqURL, created, err := ensureQueue(ctx, client)
	if err != nil {
		return fail("creating the queue", err)
	}

	// Migrations.
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil {
		return fail("migrating the inbox", err)
	}
	if _, err := warehouse.Migrate(ctx, pool); err != nil {
		return fail("migrating the warehouse", err)
	}

	// The worker.
	ib, err := inbox.New(pool, &inbox.Config{Logger: o.Log})
	if err != nil {
		return err
	}
	h, err := warehouse.New(ib)
	if err != nil {
		return err
	}
	m := newCounters()
	w, err := worker.New(client, &worker.Config{
		QueueURL:    queueURL,
		Handler:     h,
		Concurrency: concurrency,
		WaitTime:    2 * time.Second, // short long polls make the stop at the end quick
		Logger:      o.Log,
		Metrics:     m,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return fail("starting the worker", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		if serr := w.Stop(sctx); serr != nil {
			_ = w.StopAndCancel(sctx)
			if err == nil {
				err = fmt.Errorf("stopping the worker: %w", serr)
			}
		}
	}()
	how := "existing"
	if created {
		how = "created, with " + dlqName + " and maxReceiveCount " + strconv.Itoa(maxReceiveCount)
	}
	say("SQS:        %s, queue %s (%s)", sqsDesc, queueName, how)
	say("PostgreSQL: %s", dbDesc)
	say("Worker:     warehouse handler, %d at once, inbox schema %s", concurrency, inbox.DefaultSchema)
	say("")

	// The story: evt_9f3k, twice.
	story := event{ID: storyEvent, OrderID: storyOrder, CustomerID: "cus_42", Amount: 4999}
	for i := range 2 {
		if i == 1 {
			say("          (in the story the worker crashed after the commit, before the delete, so SQS delivers it again)")
			if err := sleep(ctx, o.Pause); err != nil {
				return fail("waiting between the deliveries", err)
			}
		}
		before := m.snapshot()
		if err := sqstest.Send(ctx, client, queueURL, []sqstest.Message{story.message()}); err != nil {
			return fail("sending "+storyEvent, err)
		}
		if err := waitFor(ctx, time.Minute, func() (bool, error) {
			return m.handled() > before.handled(), nil
		}); err != nil {
			return fail("waiting for "+storyEvent, err)
		}
		tasks, err := warehouse.PickTasks(ctx, pool, []string{storyOrder})
		if err != nil {
			return fail("counting pick tasks", err)
		}
		outcome := "processed: order " + storyOrder + " is PICKING, a box heads for the door"
		if m.snapshot().duplicates > before.duplicates {
			outcome = "duplicate: the inbox has its row; deleted, no second box"
			if i == 0 {
				outcome = "duplicate: an earlier run against this database processed it; deleted, no second box"
			}
		}
		say("%s  %s delivery %d: %s (pick tasks: %d)", time.Now().Format("15:04:05"), storyEvent, i+1, outcome, tasks[storyOrder])
	}
	say("")

	// The load: o.Events more events, a fifth of them sent 2 to 5 times.
	events := makeEvents(o.Events)
	ids := make([]string, 0, len(events)+1)
	eventIDs := make([]string, 0, len(events)+1)
	ids, eventIDs = append(ids, storyOrder), append(eventIDs, storyEvent)
	for _, e := range events {
		ids, eventIDs = append(ids, e.OrderID), append(eventIDs, e.ID)
	}
	var earlier int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sqsinbox.processed_messages WHERE handler = $1 AND event_id = ANY($2)`,
		warehouse.HandlerName, eventIDs[1:]).Scan(&earlier); err != nil {
		return fail("reading the inbox", err)
	}
	msgs := messages(events)
	say("Sending %s more OrderPaid events as %s messages (a fifth of them 2 to 5 times, shuffled)...",
		thousands(len(events)), thousands(len(msgs)))
	loadStart := time.Now()
	before := m.snapshot()
	if err := sqstest.Send(ctx, client, queueURL, msgs); err != nil {
		return fail("sending", err)
	}
	sendTime := time.Since(loadStart)
	lastReport := time.Now()
	if err := waitFor(ctx, time.Minute+time.Duration(len(msgs))*10*time.Millisecond, func() (bool, error) {
		done := m.handled() - before.handled()
		if time.Since(lastReport) > 5*time.Second {
			say("  ... %s of %s messages handled", thousands(done), thousands(len(msgs)))
			lastReport = time.Now()
		}
		if done < len(msgs) {
			return false, nil
		}
		n, err := sqstest.Count(ctx, client, queueURL)
		return err == nil && n == 0, nil
	}); err != nil {
		n, _ := sqstest.Count(context.WithoutCancel(ctx), client, queueURL)
		d := -1
		if dlqURL != "" {
			d, _ = sqstest.Count(context.WithoutCancel(ctx), client, dlqURL)
		}
		return fail(fmt.Sprintf("waiting for the queue to drain (%d handled of %d, %d left in the queue, %d in the DLQ)",
			m.handled()-before.handled(), len(msgs), n, d), err)
	}
	loadTime := time.Since(loadStart)

	tasks, err := warehouse.PickTasks(ctx, pool, ids)
	if err != nil {
		return fail("counting pick tasks", err)
	}
	lo, hi, bad := 1<<31, 0, 0
	for _, id := range ids {
		n := tasks[id]
		lo, hi = min(lo, n), max(hi, n)
		if n != 1 {
			bad++
		}
	}
	total := m.snapshot()
	deliveries := len(msgs) + 2
	left, err := sqstest.Count(ctx, client, queueURL)
	if err != nil {
		return fail("reading the queue's depth", err)
	}
	inDLQ := 0
	if dlqURL != "" {
		if inDLQ, err = sqstest.Count(ctx, client, dlqURL); err != nil {
			return fail("reading the DLQ's depth", err)
		}
	}

	say("")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	row("events sent", thousands(len(events)+1))
	row("messages sent (deliveries)", thousands(deliveries))
	row("processed (one effect each)", thousands(total.processed))
	row("duplicates suppressed", thousands(total.duplicates))
	if total.failed > 0 {
		row("failed and retried", thousands(total.failed))
	}
	row("left in the queue / its DLQ", fmt.Sprintf("%d / %d", left, inDLQ))
	row("pick tasks per order", fmt.Sprintf("min %d, max %d, over %s orders", lo, hi, thousands(len(ids))))
	row("time taken", fmt.Sprintf("%.1fs in all; the %s messages were sent in %.1fs and drained %.1fs after the first was sent (%s/s)",
		time.Since(start).Seconds(), thousands(len(msgs)), sendTime.Seconds(), loadTime.Seconds(),
		thousands(int(float64(len(msgs))/loadTime.Seconds()))))
	_ = tw.Flush()
	if earlier > 0 {
		say("\n  %s of the events were processed by an earlier run against this database: the inbox remembered them.", thousands(earlier))
	}
	if bad > 0 {
		return fmt.Errorf("%d orders have a number of pick tasks other than 1", bad)
	}
	say("\nEvery order has exactly one pick task: each event took effect once, however often it was delivered.")
	return nil
}

// ensureQueue returns the warehouse queue, creating it and its dead-letter queue first when it
// does not exist.
func ensureQueue(ctx context.Context, c *sqs.Client) (url, dlqURL string, created bool, err error) {
	if out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queueName)}); err == nil {
		if d, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(dlqName)}); err == nil {
			dlqURL = aws.ToString(d.QueueUrl)
		}
		return aws.ToString(out.QueueUrl), dlqURL, false, nil
	} else if _, ok := errors.AsType[smithy.APIError](err); !ok {
		return "", "", false, err // not an answer from the server
	}
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	d, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlqName), Attributes: map[string]string{
		"MessageRetentionPeriod": secs(dlqRetention),
		"VisibilityTimeout":      secs(visibility),
	}})
	if err != nil {
		return "", "", false, err
	}
	dlqURL = aws.ToString(d.QueueUrl)
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", false, err
	}
	rp, _ := json.Marshal(map[string]any{"deadLetterTargetArn": a.Attributes["QueueArn"], "maxReceiveCount": maxReceiveCount})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queueName), Attributes: map[string]string{
		"MessageRetentionPeriod": secs(retention),
		"VisibilityTimeout":      secs(visibility),
		"MaximumMessageSize":     "262144",
		"DelaySeconds":           "0",
		"RedrivePolicy":          string(rp),
	}})
	if err != nil {
		return "", "", false, err
	}
	return aws.ToString(q.QueueUrl), dlqURL, true, nil
}

// event is one OrderPaid and how many times it is sent.
type event struct {
	ID, OrderID, CustomerID string
	Amount                  int64
	Times                   int
}

func (e event) message() sqstest.Message {
	b, _ := json.Marshal(map[string]any{"id": e.ID, "order_id": e.OrderID, "customer_id": e.CustomerID,
		"amount": e.Amount, "currency": "EUR"})
	return sqstest.Message{Body: string(b), Attributes: map[string]string{"event_id": e.ID}}
}

// makeEvents returns n events; every fifth is sent 2, 3, 4 or 5 times in turn.
func makeEvents(n int) []event {
	out := make([]event, n)
	for i := range out {
		out[i] = event{
			ID:         fmt.Sprintf("evt_%04d", i+1),
			OrderID:    fmt.Sprintf("ord_%04d", i+1),
			CustomerID: fmt.Sprintf("cus_%d", i%97),
			Amount:     int64(1000 + i%9000),
			Times:      1,
		}
		if i%5 == 0 {
			out[i].Times = 2 + (i/5)%4
		}
	}
	return out
}

// messages returns every delivery of events, shuffled.
func messages(events []event) []sqstest.Message {
	var msgs []sqstest.Message
	for _, e := range events {
		for range e.Times {
			msgs = append(msgs, e.message())
		}
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// counters is the worker's metrics, as the demo reads them.
type counters struct {
	mu sync.Mutex
	c  snapshot
}

type snapshot struct{ processed, duplicates, failed int }

func (s snapshot) handled() int { return s.processed + s.duplicates }

func newCounters() *counters { return &counters{} }

func (m *counters) Add(c worker.Counter, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c {
	case worker.Processed:
		m.c.processed += n
	case worker.Duplicates:
		m.c.duplicates += n
	case worker.Failed:
		m.c.failed += n
	}
}
func (m *counters) Observe(worker.Histogram, time.Duration) {}
func (m *counters) SetInFlight(int)                         {}

func (m *counters) snapshot() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c
}

func (m *counters) handled() int { return m.snapshot().handled() }

// waitFor polls cond every 20 ms until it is true, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// thousands formats n with commas: 1,702.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

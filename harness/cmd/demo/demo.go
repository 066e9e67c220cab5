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
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/loyalty/loyalty"
	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// The topic and queues the demo uses: the warehouse and loyalty examples', as localstack/ and
// terraform/ create them. Each queue has a DLQ named after it ("warehouse-dlq").
const (
	topicName       = "order-paid"
	maxReceiveCount = 5
	retention       = 4 * 24 * time.Hour
	dlqRetention    = 14 * 24 * time.Hour
	visibility      = 30 * time.Second
	// concurrency is each worker's batches in flight, each a transaction of up to
	// worker.DefaultHandlerBatch messages on a connection of its own.
	concurrency = 4
)

// The event of the story.
const (
	storyEvent    = "evt_9f3k"
	storyOrder    = "ord_7731"
	storyCustomer = "cus_42"
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
	pcfg.MaxConns = 2*concurrency + 4 // two workers
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

	// SQS and SNS: fauxqs unless SQSINBOX_TEST_SQS says goaws or the environment names a server.
	sqsDesc := "AWS_ENDPOINT_URL_SQS=" + os.Getenv("AWS_ENDPOINT_URL_SQS")
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		if os.Getenv(sqstest.EnvServer) == "" {
			restore := setEnv(sqstest.EnvServer, string(sqstest.KindFauxqs))
			defer restore() // after srv.Close, which sets back only what Start changed
		}
		if sqstest.Kind(os.Getenv(sqstest.EnvServer)) == sqstest.KindGoAws {
			say("Starting GoAws %s (built from the Go module proxy on first use)...", sqstest.GoAwsVersion)
			sqsDesc = "GoAws " + sqstest.GoAwsVersion + " (started here)"
		} else {
			say("Starting fauxqs %s (installed with npm on first use)...", sqstest.FauxqsVersion)
			sqsDesc = "fauxqs " + sqstest.FauxqsVersion + " (started here)"
		}
	}
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return fail("starting the SQS server", err)
	}
	defer srv.Close() // it also sets back the AWS environment it pointed at the server it started
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" {
		sqsDesc = "AWS_ENDPOINT_URL=" + os.Getenv("AWS_ENDPOINT_URL")
	}
	client := srv.Client()
	snsClient, err := srv.SNSClient(ctx)
	if err != nil {
		return err
	}
	fan, err := ensureFanout(ctx, srv, snsClient)
	if err != nil {
		return fail("creating the topic and its queues", err)
	}

	// Migrations.
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil {
		return fail("migrating the inbox", err)
	}
	if _, err := warehouse.Migrate(ctx, pool); err != nil {
		return fail("migrating the warehouse", err)
	}
	if _, err := loyalty.Migrate(ctx, pool); err != nil {
		return fail("migrating loyalty", err)
	}

	// The workers: warehouse and loyalty, each on its own queue, each with its own inbox rows.
	ib, err := inbox.New(pool, &inbox.Config{Logger: o.Log})
	if err != nil {
		return err
	}
	wh, err := warehouse.New(ib)
	if err != nil {
		return err
	}
	ly, err := loyalty.New(ib)
	if err != nil {
		return err
	}
	fan.subs[0].handler, fan.subs[1].handler = wh, ly
	for _, sub := range fan.subs {
		sub.m = newCounters()
		var w *worker.Worker
		w, err = worker.New(client, &worker.Config{ // err, not a new one: the deferred stop sets it
			QueueURL:    sub.url,
			Handler:     sub.handler,
			Concurrency: concurrency,
			WaitTime:    2 * time.Second, // short long polls make the stop at the end quick
			Logger:      o.Log,
			Metrics:     sub.m,
		})
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return fail("starting the "+sub.name+" worker", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			if serr := w.Stop(sctx); serr != nil {
				_ = w.StopAndCancel(sctx)
				if err == nil {
					err = fmt.Errorf("stopping the %s worker: %w", sub.name, serr)
				}
			}
		}()
	}
	say("SQS, SNS:   %s, topic %s", sqsDesc, topicName)
	for _, sub := range fan.subs {
		say("            -> queue %-9s %s (%s)", sub.name, sub.delivery(), sub.how)
	}
	say("PostgreSQL: %s", dbDesc)
	say("Workers:    warehouse and loyalty, %d batches at once each (up to %d messages per transaction), inbox schema %s",
		concurrency, worker.DefaultHandlerBatch, inbox.DefaultSchema)
	say("")

	// The story: evt_9f3k published once, then once more.
	story := event{ID: storyEvent, OrderID: storyOrder, CustomerID: storyCustomer, Amount: 4999}
	for i := range 2 {
		if i == 1 {
			say("          (in the story the producer's Publish timed out after SNS took it, so it published evt_9f3k again:")
			say("           both queues get it a second time)")
			if err := sleep(ctx, o.Pause); err != nil {
				return fail("waiting between the deliveries", err)
			}
		}
		before := fan.snapshots()
		if err := sqstest.Publish(ctx, snsClient, fan.topicARN, []sqstest.Message{story.message()}); err != nil {
			return fail("publishing "+storyEvent, err)
		}
		if err := waitFor(ctx, time.Minute, func() (bool, error) { return fan.handledSince(before, 1), nil }); err != nil {
			return fail("waiting for "+storyEvent, err)
		}
		tasks, err := warehouse.PickTasks(ctx, pool, []string{storyOrder})
		if err != nil {
			return fail("counting pick tasks", err)
		}
		points, err := loyalty.Points(ctx, pool)
		if err != nil {
			return fail("reading points", err)
		}
		effects := []string{
			fmt.Sprintf("processed: order %s is PICKING, a box heads for the door (pick tasks: %d)", storyOrder, tasks[storyOrder]),
			fmt.Sprintf("processed: %s earns %d points (points: %d)", storyCustomer, loyalty.PointsPerOrder, points[storyCustomer]),
		}
		for j, sub := range fan.subs {
			outcome := effects[j]
			if sub.m.snapshot().duplicates > before[j].duplicates {
				what := []string{"no second box (pick tasks: %d)", "no second %d points (points: %d)"}[j]
				args := [][]any{{tasks[storyOrder]}, {loyalty.PointsPerOrder, points[storyCustomer]}}[j]
				outcome = "duplicate: the inbox has its row; deleted, " + fmt.Sprintf(what, args...)
				if i == 0 {
					outcome = "duplicate: an earlier run against this database processed it; deleted, " + fmt.Sprintf(what, args...)
				}
			}
			lead := fmt.Sprintf("%s  %s publish %d:", time.Now().Format("15:04:05"), storyEvent, i+1)
			if j > 0 {
				lead = strings.Repeat(" ", len(lead))
			}
			say("%s %-9s %s", lead, sub.name, outcome)
		}
	}
	// The operator's question, as `sqsinbox events show evt_9f3k` answers it: which handlers
	// applied the event, when, and from which delivery.
	found, err := ib.Lookup(ctx, storyEvent)
	if err != nil {
		return fail("looking up "+storyEvent, err)
	}
	say("\nWas %s processed? (sqsinbox events show %s)", storyEvent, storyEvent)
	for _, p := range found {
		say("  %-9s at %s, from queue %s, message %s (receive %d), on %s", p.Handler, p.SeenAt.UTC().Format("15:04:05.000"),
			p.Queue, p.MessageID, p.ReceiveCount, p.Instance)
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
	// What an earlier run against this database applied already: those events are duplicates
	// now, for both handlers, and earn no points.
	earlier := map[string]map[string]bool{}
	for _, sub := range fan.subs {
		done, err := processed(ctx, pool, sub.name, eventIDs[1:])
		if err != nil {
			return fail("reading the inbox", err)
		}
		earlier[sub.name] = done
	}
	pointsBefore, err := loyalty.Points(ctx, pool)
	if err != nil {
		return fail("reading points", err)
	}
	msgs := messages(events)
	say("Publishing %s more OrderPaid events as %s messages to %s (a fifth of them 2 to 5 times, shuffled)...",
		thousands(len(events)), thousands(len(msgs)), topicName)
	loadStart := time.Now()
	before := fan.snapshots()
	if err := sqstest.Publish(ctx, snsClient, fan.topicARN, msgs); err != nil {
		return fail("publishing", err)
	}
	sendTime := time.Since(loadStart)
	lastReport := time.Now()
	if err := waitFor(ctx, time.Minute+time.Duration(len(msgs))*20*time.Millisecond, func() (bool, error) {
		if time.Since(lastReport) > 5*time.Second {
			var parts []string
			for j, sub := range fan.subs {
				parts = append(parts, fmt.Sprintf("%s %s", sub.name, thousands(sub.m.handled()-before[j].handled())))
			}
			say("  ... of %s messages per queue, handled: %s", thousands(len(msgs)), strings.Join(parts, ", "))
			lastReport = time.Now()
		}
		if !fan.handledSince(before, len(msgs)) {
			return false, nil
		}
		for _, sub := range fan.subs {
			// A failed count is not the end of the wait: the next poll asks again.
			if n, err := sqstest.Count(ctx, client, sub.url); err != nil || n != 0 {
				return false, nil //nolint:nilerr // keep polling until the deadline
			}
		}
		return true, nil
	}); err != nil {
		var parts []string
		for j, sub := range fan.subs {
			n, _ := sqstest.Count(context.WithoutCancel(ctx), client, sub.url)
			d := -1
			if sub.dlqURL != "" {
				d, _ = sqstest.Count(context.WithoutCancel(ctx), client, sub.dlqURL)
			}
			parts = append(parts, fmt.Sprintf("%s: %d handled of %d, %d left in the queue, %d in the DLQ",
				sub.name, sub.m.handled()-before[j].handled(), len(msgs), n, d))
		}
		return fail("waiting for the queues to drain ("+strings.Join(parts, "; ")+")", err)
	}
	loadTime := time.Since(loadStart)

	// The effects: one pick task per order; 50 points per event new to loyalty.
	tasks, err := warehouse.PickTasks(ctx, pool, ids)
	if err != nil {
		return fail("counting pick tasks", err)
	}
	lo, hi, badTasks := 1<<31, 0, 0
	for _, id := range ids {
		n := tasks[id]
		lo, hi = min(lo, n), max(hi, n)
		if n != 1 {
			badTasks++
		}
	}
	pointsAfter, err := loyalty.Points(ctx, pool)
	if err != nil {
		return fail("reading points", err)
	}
	wantPoints := map[string]int64{}
	for _, e := range events {
		if !earlier[loyalty.HandlerName][e.ID] {
			wantPoints[e.CustomerID] += loyalty.PointsPerOrder
		}
	}
	badPoints := 0
	for c, want := range wantPoints {
		if pointsAfter[c]-pointsBefore[c] != want {
			badPoints++
		}
	}

	say("")
	row := func(k string, v ...string) {
		v = append(v, "", "")
		say("  %-29s %9s  %9s", k, v[0], v[1])
	}
	row("", "warehouse", "loyalty")
	row("events published", thousands(len(events)+1), "")
	row("messages published", thousands(len(msgs)+2), "")
	var cells [8][]string
	for _, sub := range fan.subs {
		total := sub.m.snapshot()
		rows, err := inboxRows(ctx, pool, sub.name, eventIDs)
		if err != nil {
			return fail("reading the inbox", err)
		}
		left, err := sqstest.Count(ctx, client, sub.url)
		if err != nil {
			return fail("reading the queue's depth", err)
		}
		inDLQ := 0
		if sub.dlqURL != "" {
			if inDLQ, err = sqstest.Count(ctx, client, sub.dlqURL); err != nil {
				return fail("reading the DLQ's depth", err)
			}
		}
		cells[0] = append(cells[0], thousands(total.handled()+total.failed))
		cells[1] = append(cells[1], thousands(total.processed))
		cells[2] = append(cells[2], thousands(total.duplicates))
		cells[3] = append(cells[3], thousands(total.failed))
		cells[4] = append(cells[4], thousands(rows))
		cells[5] = append(cells[5], fmt.Sprintf("%d / %d", left, inDLQ))
		delivered := total.handled() + total.failed
		cells[6] = append(cells[6], thousands(total.requests))
		cells[7] = append(cells[7], fmt.Sprintf("%.2f", float64(total.requests)/float64(max(delivered, 1))))
	}
	row("delivered to the queue", cells[0]...)
	row("processed (one effect each)", cells[1]...)
	row("duplicates suppressed", cells[2]...)
	if cells[3][0] != "0" || cells[3][1] != "0" {
		row("failed and retried", cells[3]...)
	}
	row("inbox rows (handler, event)", cells[4]...)
	row("left in the queue / its DLQ", cells[5]...)
	// What SQS bills: every request, the idle long polls of the story's pauses included.
	row("SQS requests (the bill)", cells[6]...)
	row("SQS requests per delivery", cells[7]...)
	if srv.Kind == sqstest.KindFauxqs {
		say("  (fauxqs lets every waiting long poll go, empty but for one, when a message arrives; SQS keeps them")
		say("  waiting, so a queue fed a message at a time costs fewer receives there; a backlog about 0.21)")
	}
	say("  pick tasks per order: min %d, max %d, over %s orders; points: %d per new event, for %s customers",
		lo, hi, thousands(len(ids)), loyalty.PointsPerOrder, thousands(len(wantPoints)-badPoints))
	say("  time taken: %.1fs in all; the %s messages were published in %.1fs, and both queues drained %.1fs after the first was published (%s deliveries/s)",
		time.Since(start).Seconds(), thousands(len(msgs)), sendTime.Seconds(), loadTime.Seconds(),
		thousands(int(float64(len(fan.subs)*len(msgs))/loadTime.Seconds())))
	var batches, batched int
	for _, sub := range fan.subs {
		s := sub.m.snapshot()
		batches, batched = batches+s.batches, batched+s.batched
	}
	if batches > 0 {
		say("  drain rate: %s deliveries/s through both workers; batched commits: %s transactions for %s deliveries, %.1f per transaction",
			thousands(int(float64(len(fan.subs)*len(msgs))/loadTime.Seconds())), thousands(batches), thousands(batched),
			float64(batched)/float64(batches))
	}
	if n := len(earlier[warehouse.HandlerName]); n > 0 {
		say("\n  %s of the events were processed by an earlier run against this database: the inbox remembered them.", thousands(n))
	}
	if badTasks > 0 || badPoints > 0 {
		return fmt.Errorf("%d orders have a number of pick tasks other than 1, %d customers a number of points other than 50 per event", badTasks, badPoints)
	}
	say("\nEvery order has exactly one pick task and every event earned its points once: each handler applied each")
	say("event once, however often it was published and delivered.")
	return nil
}

// ensureQueue returns the queue queueName, creating it and its dead-letter queue first when it
// does not exist.
func ensureQueue(ctx context.Context, c *sqs.Client, queueName string) (url, dlqURL string, created bool, err error) {
	dlqName := queueName + "-dlq"
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

type snapshot struct{ processed, duplicates, failed, batches, batched, requests int }

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
	case worker.Batches:
		m.c.batches += n
	case worker.BatchedMessages:
		m.c.batched += n
	case worker.SQSRequests:
		m.c.requests += n
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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// region is the region of the printed environment; fauxqs puts it in its ARNs.
const region = "us-east-1"

// devDatabase is the database of the command's own PostgreSQL.
const devDatabase = "sqsinbox"

// pingTimeout bounds the check that DATABASE_URL answers.
const pingTimeout = 10 * time.Second

// The steps the command prints after the environment; README.md and examples/firstworker/README.md
// show the same lines (TestReadmeShowsTheDevSteps).
const (
	migrateFirstWorker = `go run ./examples/firstworker migrate`
	runFirstWorker     = `QUEUE_URL=$WAREHOUSE_QUEUE_URL go run ./examples/firstworker`
	sendExample        = `echo '{"id":"evt_1","order_id":"o-1"}' | go run ./cmd/sqsinbox send --queue warehouse`
	selectPickTasks    = `psql "$DATABASE_URL" -c 'SELECT * FROM pick_tasks'`
)

// readyLine starts the line printed once everything runs, after the environment.
const readyLine = "Running until Ctrl-C or SIGTERM"

// overriding are the AWS variables that would take precedence over the printed environment (or,
// the last one, make the SDK ignore AWS_ENDPOINT_URL): the command unsets them for itself.
var overriding = []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SNS", "AWS_SESSION_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"}

func run(ctx context.Context, o options) error {
	say := func(format string, args ...any) { fmt.Fprintf(o.Out, format+"\n", args...) }
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while %s; everything started was stopped", what)
		}
		return fmt.Errorf("%s: %w", what, err)
	}

	// The command's own clients are made from the environment it prints, so what it creates is
	// what a worker given that environment reaches.
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", o.Port)
	env := [][2]string{
		{"AWS_ENDPOINT_URL", endpoint},
		{"AWS_REGION", region},
		{"AWS_DEFAULT_REGION", region}, // the aws CLI v1 reads only this one
		{"AWS_ACCESS_KEY_ID", "test"},
		{"AWS_SECRET_ACCESS_KEY", "test"},
	}
	for _, kv := range env {
		_ = os.Setenv(kv[0], kv[1])
	}
	for _, k := range overriding {
		_ = os.Unsetenv(k)
	}
	if err := checkQueueNames(o.Queues); err != nil {
		return err
	}

	say("Starting fauxqs %s on %s (installed with npm on first use)...", sqstest.FauxqsVersion, endpoint)
	srv, err := sqstest.StartFauxqsAt(ctx, o.Port)
	if errors.Is(err, sqstest.ErrPortTaken) {
		return fmt.Errorf("%w (make dev DEV_PORT=4600, or -port 4600)", err)
	}
	if err != nil {
		return fail("starting fauxqs", err)
	}
	defer srv.Close()
	exited := srv.Exited()

	dbURL, dbDesc := os.Getenv("DATABASE_URL"), "the database DATABASE_URL names"
	own := dbURL == ""
	if own {
		say("Starting PostgreSQL on 127.0.0.1:%d (a cluster from the local binaries, data in %s)...", o.PGPort, o.PGData)
		db, err := pgtest.StartKept(ctx, o.PGData, o.PGPort, devDatabase)
		if errors.Is(err, pgtest.ErrPortTaken) {
			return fmt.Errorf("%w (make dev DEV_PG_PORT=5440, or -pgport 5440; or set DATABASE_URL to a database of yours)", err)
		}
		if err != nil {
			return fail("starting PostgreSQL (or set DATABASE_URL to a database of yours)", err)
		}
		defer db.Close()
		dbURL, dbDesc = db.URL, "a cluster kept in "+db.Dir()+" (same URL and data at the next start; delete the directory to start afresh)"
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		// The parse error can quote the URL, password included: say only what is wrong.
		return errors.New("DATABASE_URL does not parse as a PostgreSQL connection string")
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	var version string
	err = pool.QueryRow(pctx, "SHOW server_version").Scan(&version)
	cancel()
	if err != nil {
		return fail("connecting to PostgreSQL ("+dbDesc+")", err)
	}

	snsClient, err := srv.SNSClient(ctx)
	if err != nil {
		return err
	}
	r, err := createResources(ctx, srv, snsClient, o.Queues)
	if err != nil {
		return fail("creating the queues and the topic", err)
	}
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil {
		return fail("migrating the inbox", err)
	}
	if _, err := outbox.Migrate(ctx, pool, ""); err != nil {
		return fail("migrating the outbox", err)
	}

	say("")
	say("SQS, SNS:   fauxqs %s on %s", sqstest.FauxqsVersion, endpoint)
	say("PostgreSQL: %s, %s", strings.Fields(version)[0], dbDesc)
	say("Queues:     %s, each with a DLQ (NAME%s, maxReceiveCount %d) and a %v visibility timeout",
		strings.Join(append(slices.Clone(queueNames), o.Queues...), ", "), dlqSuffix, maxReceiveCount, visibility)
	var subs []string
	for _, s := range subscriptions {
		how := "SNS envelopes"
		if s.raw {
			how = "raw delivery"
		}
		subs = append(subs, s.queue+" ("+how+")")
	}
	say("Topic:      %s, subscribed: %s", topicName, strings.Join(subs, ", "))
	say("Inbox:      migrated (schema %s); outbox: migrated (schema %s)", inbox.DefaultSchema, outbox.DefaultSchema)
	say("")
	say("In another terminal, export:")
	say("")
	for _, kv := range env {
		say("export %s=%s", kv[0], shellQuote(kv[1]))
	}
	say("export DATABASE_URL=%s", shellQuote(dbURL))
	for _, q := range r.queues {
		say("export %s=%s", envName(q.name, "_QUEUE_URL"), shellQuote(q.url))
	}
	say("export %s=%s", envName(topicName, "_TOPIC_ARN"), shellQuote(r.topicARN))
	say("")
	say("Then run the first worker and send it an OrderPaid (README.md, \"Running it locally\"):")
	say("")
	say("%s   # pick_tasks", migrateFirstWorker)
	say("%s   # until Ctrl-C", runFirstWorker)
	say("%s   # in a third terminal", sendExample)
	say("%s", selectPickTasks)
	say("")
	stops := "fauxqs, whose queues and messages are then gone,"
	if own {
		stops += " and PostgreSQL, whose data is kept,"
	}
	say("%s, which stop %s.", readyLine, strings.TrimSuffix(stops, ","))

	select {
	case <-ctx.Done():
		say("Stopping...")
		return nil
	case <-exited:
		return fmt.Errorf("fauxqs exited: %s", srv.Output())
	}
}

// envName names the variable of the printed environment that holds a queue's URL or the topic's
// ARN: envName("payments-ledger", "_QUEUE_URL") is PAYMENTS_LEDGER_QUEUE_URL, and
// envName("billing.fifo", "_QUEUE_URL") BILLING_FIFO_QUEUE_URL.
func envName(name, suffix string) string {
	return strings.ToUpper(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)) + suffix
}

// shellQuote returns v as one word of a POSIX shell: as it is when it holds only characters that
// no shell treats specially, else in single quotes.
func shellQuote(v string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@,+=%", r)
	}
	if v != "" && strings.IndexFunc(v, func(r rune) bool { return !safe(r) }) < 0 {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

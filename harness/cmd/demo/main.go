// Command demo is `make demo`: the OrderPaid story of the README, end to end, on this machine,
// through the SNS fan-out.
//
// It brings up an SQS and SNS server and PostgreSQL (a throwaway cluster from the local binaries,
// unless DATABASE_URL names a database). The server is fauxqs (installed with npm on first use),
// whose SNS delivers as AWS does, raw or in envelopes; SQSINBOX_TEST_SQS=goaws picks GoAws
// instead (its SNS envelopes are malformed, so both subscriptions are raw there), and
// AWS_ENDPOINT_URL_SQS (or AWS_ENDPOINT_URL) a server of your own, such as LocalStack. It
// creates the topic order-paid and the queues warehouse and loyalty with their dead-letter
// queues when they do not exist, subscribes both queues (warehouse with raw message delivery,
// loyalty with SNS envelopes), migrates, and runs the warehouse and loyalty workers in this
// process. It publishes evt_9f3k twice, a few seconds apart, then 1,000 other OrderPaid events of
// which a fifth are published two to five times, waits until both queues are drained and every
// event is effected, prints a table, and stops everything it started, on every path (Ctrl-C
// included). It exits non-zero if any order has a number of pick tasks other than 1, or any
// customer other than 50 points per event.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	o := options{Out: os.Stdout}
	flag.IntVar(&o.Events, "events", 1000, "OrderPaid events to publish besides evt_9f3k; a fifth of them are published 2 to 5 times")
	flag.DurationVar(&o.Pause, "pause", 3*time.Second, "the pause between the two publishes of evt_9f3k")
	flag.Parse()
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options say how big a demo to run, and where its output goes.
type options struct {
	// Events is the number of OrderPaid events published after evt_9f3k.
	Events int
	// Pause is the time between the two publishes of evt_9f3k.
	Pause time.Duration
	// Out receives the story and the table.
	Out io.Writer
	// Log receives the worker's warnings.
	Log *slog.Logger
}

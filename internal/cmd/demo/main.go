// Command demo is `make demo`: the OrderPaid story of the README, end to end, on this machine.
//
// It brings up an SQS server (GoAws, built from the Go module proxy, unless AWS_ENDPOINT_URL_SQS
// names one, such as LocalStack) and PostgreSQL (a throwaway cluster from the local binaries,
// unless DATABASE_URL names a database), creates the queue warehouse with its dead-letter queue
// when it does not exist, migrates, and runs the warehouse worker in this process. It sends
// evt_9f3k twice, a few seconds apart, then 1,000 other OrderPaid events of which a fifth are
// sent two to five times, waits until the queue is drained and every event is effected, prints a
// table, and stops everything it started, on every path (Ctrl-C included). It exits non-zero
// if any order has a number of pick tasks other than 1.
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
	flag.IntVar(&o.Events, "events", 1000, "OrderPaid events to send besides evt_9f3k; a fifth of them are sent 2 to 5 times")
	flag.DurationVar(&o.Pause, "pause", 3*time.Second, "the pause between the two deliveries of evt_9f3k")
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
	// Events is the number of OrderPaid events sent after evt_9f3k.
	Events int
	// Pause is the time between the two deliveries of evt_9f3k.
	Pause time.Duration
	// Out receives the story and the table.
	Out io.Writer
	// Log receives the worker's warnings.
	Log *slog.Logger
}

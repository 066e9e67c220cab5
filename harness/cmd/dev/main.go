// Command dev is `make dev`: an SQS and SNS server and a PostgreSQL on this machine, without
// Docker, for running the examples and your own worker against.
//
// It starts fauxqs (the pinned version the test harness installs with npm on first use) on the
// fixed address 127.0.0.1:4566 (-port), and refuses if something listens there already. It uses
// the PostgreSQL that DATABASE_URL names, after checking that it answers, or else starts a
// throwaway cluster from the local binaries (initdb, pg_ctl), whose data lives until the command
// stops. On fauxqs it creates what localstack/init/ready.d creates on LocalStack: the queues
// warehouse, loyalty, payments and payments-ledger, each with its dead-letter queue, and the SNS
// topic order-paid with warehouse (raw delivery) and loyalty (SNS envelopes) subscribed. It
// applies the inbox's and the outbox's migrations, prints the environment to export in another terminal and the
// steps of the README's "Running it locally", then waits. Ctrl-C or SIGTERM stops fauxqs and the
// throwaway cluster (deleting its data) and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	o := options{Out: os.Stdout}
	fs.IntVar(&o.Port, "port", 4566, "the port of 127.0.0.1 that fauxqs listens on (4566 is LocalStack's: the same environment works with either)")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

// options say where fauxqs listens and where the output goes.
type options struct {
	// Port is the port of 127.0.0.1 that fauxqs listens on.
	Port int
	// Out receives what was started and the environment to export.
	Out io.Writer
}

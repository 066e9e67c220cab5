// Command dev is `make dev`: an SQS and SNS server and a PostgreSQL on this machine, without
// Docker, for running the examples and your own worker against.
//
// It starts fauxqs (the pinned version the test harness installs with npm on first use) on the
// fixed address 127.0.0.1:4566 (-port), and refuses if something listens there already. It uses
// the PostgreSQL that DATABASE_URL names, after checking that it answers, or else a cluster of its
// own from the local binaries (initdb, pg_ctl) on the fixed address 127.0.0.1:5434 (-pgport),
// whose data it keeps in a fixed directory (-pgdata) across restarts, so that the printed
// DATABASE_URL stays the same; it refuses if something else listens on that port. On fauxqs it
// creates what localstack/init/ready.d creates on LocalStack: the queues warehouse, loyalty,
// payments and payments-ledger, each with its dead-letter queue, and the SNS topic order-paid
// with warehouse (raw delivery) and loyalty (SNS envelopes) subscribed; then the queues named
// with -queue (repeated), each with its dead-letter queue and redrive policy as
// terraform/modules/sqs-worker makes them. Every queue gets a short visibility timeout (5 s, not
// 30 s): fauxqs gives a message sent just after a worker stopped to that worker's abandoned long
// poll, and the message then waits out the visibility timeout. It applies the inbox's and the
// outbox's migrations, prints the environment to export in another terminal and the steps of the
// README's "Running it locally", then waits. Ctrl-C or SIGTERM stops fauxqs (its queues and
// messages are gone) and the cluster (its data is kept) and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	o := options{Out: os.Stdout}
	fs.IntVar(&o.Port, "port", 4566, "the port of 127.0.0.1 that fauxqs listens on (4566 is LocalStack's: the same environment works with either)")
	fs.IntVar(&o.PGPort, "pgport", defaultPGPort, "the port of 127.0.0.1 that the PostgreSQL of the command listens on (without DATABASE_URL)")
	fs.StringVar(&o.PGData, "pgdata", defaultPGData(), "the directory that keeps the data of the command's PostgreSQL across restarts (without DATABASE_URL); delete it to start afresh")
	fs.Func("queue", "a queue of yours to create, with its DLQ NAME-dlq and redrive policy (repeat it; a name ending in .fifo makes a FIFO queue)", func(v string) error {
		o.Queues = append(o.Queues, v)
		return nil
	})
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

// options say where fauxqs and PostgreSQL listen, which queues to add, and where the output goes.
type options struct {
	// Port is the port of 127.0.0.1 that fauxqs listens on.
	Port int
	// PGPort is the port of 127.0.0.1 of the command's own PostgreSQL.
	PGPort int
	// PGData is the directory of the command's own PostgreSQL.
	PGData string
	// Queues are the user's queues, created after the built-in ones.
	Queues []string
	// Out receives what was started and the environment to export.
	Out io.Writer
}

// defaultPGPort is the port of the command's own PostgreSQL: not 5432 (a local server's) nor
// 5433 (localstack/docker-compose.yml's).
const defaultPGPort = 5434

// defaultPGData is where the command's own PostgreSQL keeps its data: under the user's cache
// directory, or, for root, under /var/tmp, since PostgreSQL runs as the postgres user then and
// cannot reach root's home.
func defaultPGData() string {
	dir, err := os.UserCacheDir()
	if err != nil || os.Geteuid() == 0 {
		dir = "/var/tmp"
	}
	return filepath.Join(dir, "sqsinbox", "dev-postgres")
}

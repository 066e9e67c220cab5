// Command sqsinbox is the operator's tool for sqsinbox: it migrates and purges the inbox, shows
// its state and a queue's, sends test events, and redrives a dead-letter queue.
//
//	sqsinbox migrate up|down|status   apply, revert or list the inbox's and the outbox's migrations
//	sqsinbox purge                    delete inbox rows past the queues' redelivery horizon,
//	                                  expired idempotency keys and old sent outbox rows, once
//	sqsinbox stats                    rows per handler; the outbox's backlog and parked messages;
//	                                  a queue's depth and its DLQ's, and the age of their oldest
//	                                  messages (from CloudWatch)
//	sqsinbox events show|list         which handlers processed an event and when, and its recorded
//	                                  failures; a handler's events, paged
//	sqsinbox outbox                   list the outbox's parked messages, or re-queue them
//	sqsinbox send                     send JSON lines to a queue, or publish them to an SNS
//	                                  topic, with an event_id attribute
//	sqsinbox redrive                  move messages from a DLQ back to their source queue
//	sqsinbox dlq peek|discard         a DLQ's messages with their recorded failures; delete the
//	                                  ones named, recording who and why
//	sqsinbox doctor                   check the queue, its DLQ and subscriptions, and the database
//	                                  against the worker's settings; exit 1 on an error
//	sqsinbox console                  a web console on 127.0.0.1: the queues, a DLQ's peek and
//	                                  classified redrive, event lookup, the outbox's parked messages
//
// Configuration comes from flags, with environment fallbacks: DATABASE_URL for PostgreSQL, and
// the standard AWS chain (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_SNS,
// AWS_ENDPOINT_URL_CLOUDWATCH, ...) for SQS, SNS and CloudWatch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// terminal is true when stdin and stderr are a terminal: a person is there to answer.
	terminal bool
	// tracer, when set, records send's spans instead of the tracer provider that the OTEL_*
	// variables ask for (tests); send flushes it at exit and leaves it running.
	tracer tracerProvider
	// getenv reads the tracing variables send reads itself (OTEL_TRACES_EXPORTER, TRACEPARENT,
	// ...); nil means os.Getenv. The OTLP exporter reads its own from the process.
	getenv func(string) string
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

var commands = []command{
	{"migrate", "apply, revert or list the inbox's and the outbox's schema migrations", runMigrate},
	{"purge", "delete inbox rows past the queues' redelivery horizon, expired HTTP idempotency keys and old sent outbox rows, once", runPurge},
	{"stats", "show inbox rows per handler, the outbox's backlog and parked messages, and a queue's depth, its DLQ's and their oldest ages", runStats},
	{"inbox", "show the inbox's layout, or switch it to the generations or keytime layout (layout generations|keytime)", runInbox},
	{"events", "show which handlers processed an event, and when (show KEY), or list a handler's events (list --handler H)", runEvents},
	{"outbox", "list the outbox's parked messages (list-parked), or re-queue them (retry)", runOutbox},
	{"send", "send JSON lines from a file or stdin to a queue, or publish them to an SNS topic", runSend},
	{"redrive", "move messages from a dead-letter queue back to their source queue", runRedrive},
	{"dlq", "show a dead-letter queue's messages with their recorded failures (peek), or delete the ones named, recording who and why (discard)", runDLQ},
	{"doctor", "check a deployment before it loses a message: the queue, its DLQ and subscriptions, and the database, against the worker's settings", runDoctor},
	{"console", "serve a web console on 127.0.0.1: queues, DLQ peek and redrive, event lookup, the outbox's parked messages", runConsole},
}

// errUsage marks an error in the command line; it exits 2.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runEnv(ctx, env{stdin: stdin, stdout: stdout, stderr: stderr,
		terminal: isTerminal(stdin) && isTerminal(stderr)}, args)
}

func runEnv(ctx context.Context, e env, args []string) int {
	stderr := e.stderr
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		fmt.Fprintln(e.stdout, "sqsinbox", version.String())
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errNotProcessed):
			fmt.Fprintf(stderr, "sqsinbox %s: %s\n", c.name, strings.TrimPrefix(oneLine(err), errNotProcessed.Error()+": "))
			return 3
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "sqsinbox %s: %s\n", c.name, oneLine(err))
			return 2
		case ctx.Err() != nil:
			fmt.Fprintf(stderr, "sqsinbox %s: interrupted: %s\n", c.name, oneLine(err))
			return 130
		default:
			fmt.Fprintf(stderr, "sqsinbox %s: %s\n", c.name, oneLine(err))
			return 1
		}
	}
	fmt.Fprintf(stderr, "sqsinbox: unknown command %q (run `sqsinbox help`)\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: sqsinbox <command> [flags] [words]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `sqsinbox <command> --help` for a command's flags and an example; `sqsinbox --version` for the version.")
	fmt.Fprintln(w, "Flags may come before or after a command's words; `--` ends the flags.")
	fmt.Fprintln(w, "Environment: DATABASE_URL, and the standard AWS variables (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_CLOUDWATCH, ...).")
}

// oneLine keeps an error to one line: operators get a message, never a stack trace.
func oneLine(err error) string {
	var parts []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, strings.TrimSuffix(l, ":"))
		}
	}
	return strings.TrimPrefix(strings.Join(parts, ": "), errUsage.Error()+": ")
}

// defaultTimeout bounds each call to SQS or PostgreSQL (--timeout). CloudWatch, which only
// stats asks, has its own shorter bound (ageTimeout).
const defaultTimeout = 30 * time.Second

// flags is a command's flag set with the flags every command has.
type flags struct {
	*flag.FlagSet
	// timeout bounds each call to a server; 0 means no bound.
	timeout time.Duration
}

// newFlags returns a flag set whose --help shows the summary, the flags and an example, with
// --timeout registered.
func newFlags(e env, name, synopsis, example string) *flags {
	fs := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: sqsinbox %s\n\nFlags (before or after the words):\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(e.stderr, "\nExample:\n%s\n", example)
	}
	fs.DurationVar(&fs.timeout, "timeout", defaultTimeout,
		"the longest one call to SQS or PostgreSQL may take, connecting and retries included; a server that "+
			"accepts the connection but never answers fails after it, named (0: no limit)")
	return fs
}

// parse parses args and returns the words among them. Flags may come before and after words
// (the flag package alone stops at the first word); `--` ends the flags. Flag errors become
// usage errors (the flag package has already printed the usage).
func parse(fs *flags, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			words = append(words, rest...)
			break
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
	if fs.timeout < 0 {
		return nil, fmt.Errorf("%w: --timeout %v is negative (0 means no limit)", errUsage, fs.timeout)
	}
	return words, nil
}

// Command sqsinbox is the operator's tool for sqsinbox: it migrates and purges the inbox, shows
// its state and a queue's, sends test events, and redrives a dead-letter queue.
//
//	sqsinbox migrate up|down|status   apply, revert or list the inbox's migrations
//	sqsinbox purge                    delete inbox rows and idempotency keys past their ages, once
//	sqsinbox stats                    rows per handler; a queue's depth and its DLQ's, and the
//	                                  age of their oldest messages (from CloudWatch)
//	sqsinbox send                     send JSON lines to a queue, with an event_id attribute
//	sqsinbox redrive                  move messages from a DLQ back to their source queue
//
// Configuration comes from flags, with environment fallbacks: DATABASE_URL for PostgreSQL, and
// the standard AWS chain (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_SQS,
// AWS_ENDPOINT_URL_CLOUDWATCH, ...) for SQS and CloudWatch.
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
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

var commands = []command{
	{"migrate", "apply, revert or list the inbox's schema migrations", runMigrate},
	{"purge", "delete inbox rows and HTTP idempotency keys past their ages, once", runPurge},
	{"stats", "show inbox rows per handler, and a queue's depth, its DLQ's and their oldest ages", runStats},
	{"send", "send JSON lines from a file or stdin to a queue", runSend},
	{"redrive", "move messages from a dead-letter queue back to their source queue", runRedrive},
}

// errUsage marks an error in the command line; it exits 2.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
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
	fmt.Fprintln(w, "Usage: sqsinbox <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `sqsinbox <command> --help` for a command's flags and an example.")
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

// newFlags returns a flag set whose --help shows the summary, the flags and an example.
func newFlags(e env, name, synopsis, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: sqsinbox %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(e.stderr, "\nExample:\n%s\n", example)
	}
	return fs
}

// parse parses args, turning flag errors into usage errors (the flag package has already
// printed the usage).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

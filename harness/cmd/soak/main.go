// Command soak runs the reliability scenarios of harness/reliability at a large size, with
// several worker processes, and prints the checker's table. `make soak` runs it.
//
//	go run ./harness/cmd/soak -messages 50000 -workers 4
//
// It needs what the tests need: PostgreSQL (a throwaway cluster from the local binaries, or
// TEST_DATABASE_URL; the postgres-restart scenario needs the throwaway cluster) and an SQS
// server: GoAws built from the module proxy, fauxqs installed with npm (-sqs fauxqs, or
// SQSINBOX_TEST_SQS=fauxqs), or the server AWS_ENDPOINT_URL_SQS names. Worker processes are this
// binary re-executed with the worker's configuration in the environment. A scenario the server
// cannot run (FIFO on GoAws) is reported as skipped, with the reason.
//
// It exits 1 if any scenario fails the checker, or if a control run (a deliberately broken
// worker, the inbox without its timeouts) is not flagged.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

func main() {
	if code := reliability.WorkerMain(); code >= 0 {
		os.Exit(code)
	}
	os.Exit(run())
}

func run() int {
	messages := flag.Int("messages", 50000, "good events per scenario")
	workers := flag.Int("workers", 4, "worker processes (or in-process workers) per scenario")
	spread := flag.Duration("spread", 30*time.Second, "how long the producer takes to send (0: at once)")
	only := flag.String("run", "", "run only the scenarios whose name matches this regular expression")
	server := flag.String("sqs", os.Getenv(sqstest.EnvServer), "the SQS server to start: goaws or fauxqs (default "+sqstest.EnvServer+", else goaws)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: soak [flags]\n\nRuns every reliability scenario at a large size and prints the checker's table.\n\nScenarios:\n")
		for _, s := range reliability.Scenarios() {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-31s fault %2d: %s\n", s.Name, s.Fault, s.Doc)
		}
		fmt.Fprintln(flag.CommandLine.Output(), "\nFlags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	var re *regexp.Regexp
	if *only != "" {
		var err error
		if re, err = regexp.Compile(*only); err != nil {
			fmt.Fprintln(os.Stderr, "soak: -run:", err)
			return 2
		}
	}
	if *server != "" {
		// Read by sqstest.Start, and by the worker processes it starts.
		if err := os.Setenv(sqstest.EnvServer, *server); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := sqstest.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	defer srv.Close()
	db, err := pgtest.Start(ctx, "soak")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	defer db.Close()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	env := &reliability.Env{DB: db, SQS: srv, Dir: dir,
		Command: func() *exec.Cmd { return exec.Command(self) },
		Logf:    func(f string, a ...any) { fmt.Fprintf(os.Stderr, "soak: "+f+"\n", a...) }}
	size := reliability.Size{Messages: *messages, Workers: *workers, Spread: *spread}
	fmt.Printf("soak: %d messages per scenario, %d workers, producer spread %v, SQS server %s; logs in %s\n",
		size.Messages, size.Workers, size.Spread, srv.Kind, dir)
	var reports []reliability.Report
	var skipped []string
	code := 0
	start := time.Now()
	for _, sc := range reliability.Scenarios() {
		if re != nil && !re.MatchString(sc.Name) {
			continue
		}
		if sc.Skip != nil {
			if why := sc.Skip(env); why != "" {
				fmt.Fprintf(os.Stderr, "soak: %s skipped: %s\n", sc.Name, why)
				skipped = append(skipped, sc.Name)
				continue
			}
		}
		fmt.Fprintf(os.Stderr, "soak: %s (fault %d): %s\n", sc.Name, sc.Fault, sc.Doc)
		rep, err := sc.Run(ctx, env, size)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s: %v\n", sc.Name, err)
			code = 1
			if ctx.Err() != nil {
				break
			}
			continue
		}
		reports = append(reports, *rep)
		fmt.Print(rep.String())
		failed := len(rep.Problems()) > 0
		if failed != sc.ExpectFail {
			code = 1
			if sc.ExpectFail {
				fmt.Printf("soak: %s: the control run was not flagged\n", sc.Name)
			}
		}
	}
	fmt.Printf("\nsoak: %d scenarios in %v against %s (the control rows must FAIL: deliberately broken workers, and the inbox without its timeouts)\n",
		len(reports), time.Since(start).Round(time.Second), srv.Kind)
	if len(skipped) > 0 {
		fmt.Printf("soak: skipped on %s: %s\n", srv.Kind, strings.Join(skipped, ", "))
	}
	_ = reliability.WriteTable(os.Stdout, reports)
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}

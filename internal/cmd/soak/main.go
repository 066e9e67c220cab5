// Command soak runs the reliability scenarios of internal/reliability at a large size, with
// several worker processes, and prints the checker's table. `make soak` runs it.
//
//	go run ./internal/cmd/soak -messages 50000 -workers 4
//
// It needs what the tests need: PostgreSQL (a throwaway cluster from the local binaries, or
// TEST_DATABASE_URL; the postgres-restart scenario needs the throwaway cluster) and an SQS
// server (GoAws built from the module proxy, or AWS_ENDPOINT_URL_SQS). Worker processes are this
// binary re-executed with the worker's configuration in the environment.
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
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/pgtest"
	"github.com/sqsinbox/sqsinbox/internal/reliability"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
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
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: soak [flags]\n\nRuns every reliability scenario at a large size and prints the checker's table.\n\nScenarios:\n")
		for _, s := range reliability.Scenarios() {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-26s fault %2d: %s\n", s.Name, s.Fault, s.Doc)
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
	fmt.Printf("soak: %d messages per scenario, %d workers, producer spread %v; logs in %s\n", size.Messages, size.Workers, size.Spread, dir)
	var reports []reliability.Report
	code := 0
	start := time.Now()
	for _, sc := range reliability.Scenarios() {
		if re != nil && !re.MatchString(sc.Name) {
			continue
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
	fmt.Printf("\nsoak: %d scenarios in %v (the control rows must FAIL: a deliberately broken worker, and the inbox without its timeouts)\n", len(reports), time.Since(start).Round(time.Second))
	_ = reliability.WriteTable(os.Stdout, reports)
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/reqcount"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// peerRequests is the -peers flag: messages per drain of the requests table (0 skips it).
var peerRequests int

func init() {
	flag.IntVar(&peerRequests, "peers", 0, "requests table: drain a backlog of this many messages with the worker at its defaults and with sqs-consumer (npm, three settings), each through a counting proxy in front of the server, and print the SQS requests per 1,000 messages (0 skips it)")
}

// The npm kit of harness/tools/sqsconsumer: sqs-consumer and the script that drives it.
const (
	sqsConsumerVersion = "15.0.3"
	peerTimeout        = 5 * time.Minute
)

var sqsConsumerFiles = []string{"package.json", "package-lock.json", "drain.mjs"}

// peerModes are drain.mjs's settings, in the table's order, with what each means.
var peerModes = []struct{ mode, what string }{
	{"default", "sqs-consumer, its defaults (batchSize 1, handleMessage)"},
	{"message10", "sqs-consumer, batchSize 10, handleMessage"},
	{"batch10", "sqs-consumer, batchSize 10, handleMessageBatch"},
}

// peersTable drains a backlog of n messages once with the worker at its defaults (the inbox
// handler, as everywhere in this bench) and once with each of sqs-consumer's settings, each
// through its own counting proxy (reqcount.Client.Proxy) in front of the server, and prints the
// requests each made per 1,000 messages. sqs-consumer's handler does nothing: only its SQS
// requests are compared, not its rate.
func (b *bench) peersTable(ctx context.Context, n int) error {
	dir, err := sqstest.NpmKit(ctx, "sqsconsumer", sqsConsumerVersion, sqsConsumerFiles)
	if err != nil {
		return err
	}
	node, err := sqstest.FauxqsNode(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\nrequests: a backlog of %d messages drained, every SQS request counted by a proxy in front of %s, per 1,000 messages: all | receives (empty ones) | deletes | visibility changes | other\n\n", n, b.name)
	fmt.Printf("| consumer | all | receives (empty) | deletes | visibility | other |\n|---|---:|---:|---:|---:|---:|\n")
	run := func(what string, drain func(endpoint, url string) error) error {
		url, err := b.queue(ctx, n)
		if err != nil {
			return err
		}
		rc := reqcount.NewTransport(256)
		h, err := rc.Proxy(b.srv.Endpoint)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer func() { _ = hs.Close() }()
		if err := drain("http://"+ln.Addr().String(), url); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Printf("| %s | %s |\n", what, perK(rc.Snapshot(), n))
		return nil
	}
	if err := run("the worker, its defaults", func(endpoint, url string) error {
		client, err := b.srv.NewClient(ctx, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
		if err != nil {
			return err
		}
		w, err := b.runWorkerOpts(ctx, client, url, n, workerOpts{wait: worker.DefaultWaitTime})
		if err != nil {
			return err
		}
		if w.prog.done < n {
			return fmt.Errorf("drained only %d of %d messages", w.prog.done, n)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, m := range peerModes {
		if err := run(m.what, func(endpoint, url string) error {
			return drainPeer(ctx, node, dir, endpoint, url, n, m.mode)
		}); err != nil {
			return err
		}
	}
	return nil
}

// drainPeer runs drain.mjs of the kit in dir with node until it has handled n messages.
func drainPeer(ctx context.Context, node, dir, endpoint, url string, n int, mode string) error {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "drain.mjs"), endpoint, url, strconv.Itoa(n), mode)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("drain.mjs %s: %w: %s", mode, err, tailString(stderr.String(), 2000))
	}
	var res struct{ Handled, Errors int }
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return fmt.Errorf("drain.mjs %s printed %q: %w", mode, tailString(stdout.String(), 500), err)
	}
	if res.Handled != n || res.Errors != 0 {
		return fmt.Errorf("drain.mjs %s handled %d of %d messages with %d errors: %s", mode, res.Handled, n, res.Errors, tailString(stderr.String(), 2000))
	}
	return nil
}

// tailString returns the last max bytes of s.
func tailString(s string, max int) string {
	if len(s) > max {
		return "…" + s[len(s)-max:]
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The demo starts its own servers, as `make demo` does: fauxqs, or GoAws when SQSINBOX_TEST_SQS
// says so, as in the first pass of make test (sqstest; or the server AWS_ENDPOINT_URL_SQS names),
// and PostgreSQL (a pgtest throwaway cluster, or TEST_DATABASE_URL; or DATABASE_URL when set).
// The tests run it at a small size, one after the other (the demo uses the process's AWS
// environment).

// TestDemo runs the fan-out: evt_9f3k published twice, then 100 events of which a fifth are
// published 2 to 5 times; warehouse and loyalty each apply every event once, with inbox rows of
// their own.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), options{Events: 100, Out: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"evt_9f3k publish 1: warehouse processed: order ord_7731 is PICKING",
		"loyalty   processed: cus_42 earns 50 points",
		"evt_9f3k publish 2: warehouse duplicate: the inbox has its row",
		"loyalty   duplicate: the inbox has its row; deleted, no second 50 points",
		"min 1, max 1, over 101 orders",
		"Every order has exactly one pick task and every event earned its points once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// The table: both handlers processed the 101 events once each, with 101 inbox rows each,
	// and left nothing behind.
	for row, want := range map[string][]string{
		"events published":            {"101"},
		"processed (one effect each)": {"101", "101"},
		"inbox rows (handler, event)": {"101", "101"},
		"left in the queue / its DLQ": {"0", "/", "0", "0", "/", "0"},
	} {
		if got := tableRow(out.String(), row); !slices.Equal(got, want) {
			t.Errorf("row %q is %q, want %q", row, got, want)
		}
	}
	// What SQS bills: each worker counted its requests (worker.SQSRequests), at least a receive
	// and a delete per ten deliveries.
	delivered, requests := tableRow(out.String(), "delivered to the queue"), tableRow(out.String(), "SQS requests (the bill)")
	if len(delivered) != 2 || len(requests) != 2 {
		t.Fatalf("rows delivered %q and requests %q, want two cells each", delivered, requests)
	}
	for i := range 2 {
		d, err1 := strconv.Atoi(strings.ReplaceAll(delivered[i], ",", ""))
		r, err2 := strconv.Atoi(strings.ReplaceAll(requests[i], ",", ""))
		if err1 != nil || err2 != nil || r < 2*((d+9)/10) {
			t.Errorf("column %d: %q requests for %q deliveries; want at least a receive and a delete per ten", i, requests[i], delivered[i])
		}
	}
	// Loyalty's subscription delivers SNS envelopes, except on GoAws, whose envelopes are
	// malformed (the header says so).
	if !strings.Contains(out.String(), "-> queue loyalty   SNS envelopes, unwrapped by the worker") &&
		!strings.Contains(out.String(), "raw on GoAws, whose SNS envelopes are malformed") {
		t.Errorf("loyalty's subscription is neither enveloped nor said to be raw because of GoAws")
	}
}

// tableRow returns the cells of the table row whose label is label.
func tableRow(out, label string) []string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "  "+label+" "); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// TestDemoInterrupted checks that Ctrl-C during the demo stops it promptly, with a message, and
// that a run after it works (what it started was stopped and undone).
func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &cancelOn{text: "publish 1:", cancel: cancel}
	start := time.Now()
	err := run(ctx, options{Events: 100, Pause: time.Hour, Out: w, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("run = %v, want an interruption", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the interrupted demo took %v to stop", d)
	}
	var out bytes.Buffer
	if err := run(t.Context(), options{Events: 10, Out: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatalf("a run after the interrupted one: %v\n%s", err, out.String())
	}
}

// cancelOn cancels when text is written.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	text   string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.text) {
		c.cancel()
	}
	return len(p), nil
}

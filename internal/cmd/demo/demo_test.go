package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// The demo starts its own servers, as `make demo` does: GoAws v0.5.4 (sqstest; or the server
// AWS_ENDPOINT_URL_SQS names) and PostgreSQL (a pgtest throwaway cluster, or TEST_DATABASE_URL;
// or DATABASE_URL when set). The tests run it at a small size, one after the other (the demo
// uses the process's AWS environment).

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), options{Events: 100, Out: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"evt_9f3k delivery 2: duplicate",
		"events sent                  101",
		"min 1, max 1, over 101 orders",
		"Every order has exactly one pick task",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

// TestDemoInterrupted checks that Ctrl-C during the demo stops it promptly, with a message, and
// that a run after it works (what it started was stopped and undone).
func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &cancelOn{text: "delivery 1:", cancel: cancel}
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

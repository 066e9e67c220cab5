// Package workertest helps tests run a [worker.Worker]: start one that is stopped when the test
// ends, and stop one with a deadline, failing the test on error.
package workertest

import (
	"context"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// StopTimeout bounds the Stop that Start registers as a cleanup, and [Stop].
const StopTimeout = time.Minute

// Start creates and starts a worker with cfg on client, failing the test if either step fails,
// and registers a cleanup that stops it. A nil cfg.Logger becomes a logger that writes warnings
// and errors to the test log (cfg itself is not changed).
func Start(t testing.TB, client worker.SQSClient, cfg *worker.Config) *worker.Worker {
	t.Helper()
	c := *cfg
	if c.Logger == nil {
		c.Logger = Logger(t)
	}
	w, err := worker.New(client, &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		_ = w.Stop(ctx) // a no-op error if the test stopped it already
	})
	return w
}

// Stop stops w within [StopTimeout], failing the test if Stop returns an error.
func Stop(t testing.TB, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

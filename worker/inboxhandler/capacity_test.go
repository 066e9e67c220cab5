package inboxhandler_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestPoolSmallerThanConcurrencyWarns (the pass's SQS server or fauxqs, and PostgreSQL): a pool of 4
// connections under a worker of Concurrency 10 starts, with one warning that names both numbers and
// the fix; a pool of 10 (one per handler call, for a program that runs no purge loop) or 11
// starts without it.
func TestPoolSmallerThanConcurrencyWarns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "capacity", MaxReceiveCount: 5})
	for _, tc := range []struct {
		conns int32
		warn  bool
	}{{4, true}, {10, false}, {11, false}} {
		t.Run(fmt.Sprint(tc.conns), func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(dbURL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = tc.conns
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			h, err := inboxhandler.New(newInbox(t, pool, b.schema, nil), "warehouse", nil, b.effect)
			if err != nil {
				t.Fatal(err)
			}
			logs := newLogCapture()
			w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, Concurrency: 10, WaitTime: time.Second,
				Logger: slog.New(logs), Handler: h})
			workertest.Stop(t, w)
			warned := logs.has("short of the concurrency", "at most 4 connections") &&
				logs.has("short of the concurrency", "up to 10 handler calls") && logs.has("short of the concurrency", "pool_max_conns=10 or more (11 if inbox.PurgeLoop shares the pool)")
			if warned != tc.warn || logs.has("short of the concurrency", "") != tc.warn {
				t.Errorf("MaxConns %d: warned %v, want %v; logged:\n%s", tc.conns, warned, tc.warn, logs)
			}
		})
	}
}

package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

func nopHandler() worker.Handler {
	return worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil })
}

// TestStartTimeoutNamesTheEndpoint (a local TCP listener that accepts and never answers): Start
// gives up after Config.StartTimeout with an error that names the endpoint, instead of hanging.
func TestStartTimeoutNamesTheEndpoint(t *testing.T) {
	t.Parallel()
	ep := "http://" + sqstest.SilentEndpoint(t)
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ep),
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	w, err := worker.New(c, &worker.Config{QueueURL: ep + "/000000000000/q", Handler: nopHandler(),
		StartTimeout: time.Second, Logger: sqstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = w.Start(ctx)
	if err == nil {
		t.Fatal("Start against a silent endpoint succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("Start was not bounded by StartTimeout: %v", err)
	}
	for _, want := range []string{ep, "Config.StartTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start = %v; want it to name %q", err, want)
		}
	}
}

// TestStartRefusesUnreadableDeadLetterQueue (fake: an access-denied answer for the DLQ):
// without the DLQ's retention the redelivery horizon is unknown, so Start refuses with a
// *DeadLetterError naming the missing permission, unless Config.IgnoreDeadLetterRetention.
func TestStartRefusesUnreadableDeadLetterQueue(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{MaxReceiveCount: 3})
		b.f.SetFaults(sqsfake.Faults{Before: func(op string, in any) error {
			if g, ok := in.(*sqs.GetQueueAttributesInput); ok && aws.ToString(g.QueueUrl) == b.dlq {
				return sqsfake.Error("AccessDenied", "not authorized to perform sqs:GetQueueAttributes")
			}
			return nil
		}})
		w, err := worker.New(s.client, &worker.Config{QueueURL: b.url, Handler: nopHandler(), Logger: sqstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Start(t.Context())
		var dle *worker.DeadLetterError
		if !errors.As(err, &dle) || !strings.Contains(err.Error(), "sqs:GetQueueAttributes") {
			t.Fatalf("Start = %v, want a *worker.DeadLetterError naming sqs:GetQueueAttributes", err)
		}
		w, err = worker.New(s.client, &worker.Config{QueueURL: b.url, Handler: nopHandler(), Logger: sqstest.Logger(t),
			IgnoreDeadLetterRetention: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start with IgnoreDeadLetterRetention: %v", err)
		}
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRedeliveryHorizon: a standard queue's horizon is the longer retention of the queue and its
// DLQ; a FIFO queue's is their sum (a FIFO message's age restarts in the DLQ).
func TestRedeliveryHorizon(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name string
		q    worker.Queue
		want time.Duration
	}{
		{"standard, no DLQ", worker.Queue{MessageRetentionPeriod: 4 * day}, 4 * day},
		{"standard", worker.Queue{MessageRetentionPeriod: 4 * day, DeadLetterTargetARN: "arn", DeadLetterRetentionPeriod: 14 * day}, 14 * day},
		{"FIFO, no DLQ", worker.Queue{FIFO: true, MessageRetentionPeriod: 4 * day}, 4 * day},
		{"FIFO", worker.Queue{FIFO: true, MessageRetentionPeriod: 4 * day, DeadLetterTargetARN: "arn", DeadLetterRetentionPeriod: 14 * day}, 18 * day},
		{"FIFO, both at the maximum", worker.Queue{FIFO: true, MessageRetentionPeriod: 14 * day, DeadLetterTargetARN: "arn", DeadLetterRetentionPeriod: 14 * day}, 28 * day},
	} {
		if got := tc.q.RedeliveryHorizon(); got != tc.want {
			t.Errorf("%s: horizon %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStartAndStopLogOneLineEach (every server): a healthy worker says at Info level that it started
// (queue, concurrency, visibility, redelivery horizon) and that it stopped (what was drained).
func TestStartAndStopLogOneLineEach(t *testing.T) {
	eachServer(t, nil, func(t *testing.T, s *server) {
		b := s.bundle(t, sqsfake.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 45 * time.Second})
		b.send(t, bodies(3, "m"))
		var log sqstest.Buffer
		w, err := worker.New(s.client, &worker.Config{QueueURL: b.url, Handler: nopHandler(), Concurrency: 7,
			Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.waitDeleted(t, 20*time.Second)
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, want := range [][]string{
			{"worker: started", "queue=" + strings.TrimPrefix(b.url[strings.LastIndex(b.url, "/"):], "/"), "concurrency=7", "visibility_timeout=45s", "handler_timeout=", "max_hold=", "shutdown_timeout=", "redelivery_horizon=336h0m0s", "max_receive_count=3"},
			{"worker: stopped", "released=", "deleted_during_stop="},
		} {
			if n := countLines(&log, want...); n != 1 {
				t.Errorf("%d lines with %q, want 1:\n%s", n, want, log.String())
			}
		}
	})
}

// TestPauseAndLeaseLossLoggedOncePerEpisode (servers with injected faults): a dependency outage over many messages
// logs one warning when the pause begins and one line when it ends; leases lost together log
// one warning, and the counter counts each.
func TestPauseAndLeaseLossLoggedOncePerEpisode(t *testing.T) {
	eachServer(t, needs(sqstest.Faults), func(t *testing.T, s *server) {
		t.Run("pause", func(t *testing.T) {
			s := s.fresh() // a fake of its own: its faults are not the other subtests\'
			t.Parallel()
			b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 30 * time.Second})
			b.send(t, bodies(10, "m"))
			var log sqstest.Buffer
			var calls atomic.Int32
			// One at a time, so that no success from before the outage ends the pause early. Four
			// failures: each keeps its message away for three times the pause it began (pauses
			// double from 0.5 s), so the last comes back within 0.5+1+2+3×4+1 = 16.5 s; six took up
			// to 65 s, past the wait below.
			w, err := worker.New(s.client, &worker.Config{QueueURL: b.url, Backoff: noBackoff, Concurrency: 1,
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})),
				Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error {
					if calls.Add(1) <= 4 {
						return worker.Unavailable(errors.New("database down"))
					}
					return nil
				})})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			b.waitDeleted(t, 60*time.Second)
			if err := w.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := countLines(&log, "level=WARN", "pausing receives"); n != 1 {
				t.Errorf("%d pause warnings over 4 failures, want 1:\n%s", n, log.String())
			}
			if n := countLines(&log, "level=INFO", "receives resumed"); n != 1 {
				t.Errorf("%d resume lines, want 1:\n%s", n, log.String())
			}
			if n := countLines(&log, "level=WARN", "message failed"); n != 0 {
				t.Errorf("%d per-message warnings during the pause, want 0", n)
			}
		})
		t.Run("lease", func(t *testing.T) {
			s := s.fresh() // a fake of its own: its faults are not the other subtests\'
			t.Parallel()
			b := s.bundle(t, sqsfake.QueueOptions{VisibilityTimeout: 3 * time.Second})
			b.f.SetFaults(sqsfake.Faults{Before: func(op string, in any) error {
				if c, ok := in.(*sqs.ChangeMessageVisibilityInput); ok && c.VisibilityTimeout > 0 {
					return sqsfake.Error("ReceiptHandleIsInvalid", "gone")
				}
				return nil
			}})
			b.send(t, bodies(3, "m"))
			var log sqstest.Buffer
			met := newTestMetrics()
			w, err := worker.New(s.client, &worker.Config{QueueURL: b.url, Metrics: met,
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})),
				Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
					<-ctx.Done()
					return ctx.Err()
				})})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			sqstest.WaitFor(t, 30*time.Second, "three leases lost", func() (bool, string) {
				return met.get(worker.LeasesLost) >= 3, ""
			})
			if err := w.StopAndCancel(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := countLines(&log, "level=WARN", "lease lost"); n != 1 {
				t.Errorf("%d lease-lost warnings for %d leases lost together, want 1:\n%s", n, met.get(worker.LeasesLost), log.String())
			}
		})
	})
}

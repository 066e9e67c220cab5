package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// failureFlags are the failure-recording table's flags: -failures rounds, each a drain with the
// inbox's failure records on and one with them off (inbox Config.NoFailureRecords), in
// alternating order.
type failureFlags struct {
	rounds int
	poison float64
	conc   int
}

var ff failureFlags

func (f *failureFlags) register() {
	flag.IntVar(&f.rounds, "failures", 0, "failure records table: this many rounds, each a drain of -n messages with -poison of them failing "+
		"(maxReceiveCount 3, no backoff) with the inbox's failure records on and one with them off, interleaved (0 skips it)")
	flag.Float64Var(&f.poison, "poison", 0.01, "with -failures: the share of messages whose handler fails")
	flag.IntVar(&f.conc, "failures-c", 8, "with -failures: the worker's Concurrency")
}

// failuresTable prints the drain rates with failure records on and off, their medians and
// ranges over the rounds, and the median of the rounds' paired ratios.
func (b *bench) failuresTable(ctx context.Context, n int) error {
	poison := max(1, int(float64(n)*ff.poison))
	off, err := inbox.New(b.pool, &inbox.Config{Schema: schema, NoFailureRecords: true})
	if err != nil {
		return err
	}
	fmt.Printf("\nfailure records: %d rounds, each a drain of %d messages (%d failing 3 times, then dead-lettered) on %s, Concurrency %d, records on and off in alternating order\n",
		ff.rounds, n, poison, b.name, ff.conc)
	// A warm-up drain of each, not reported: the first drain of a process is slower.
	for _, ib := range []*inbox.Inbox{b.ib, off} {
		if _, err := b.poisonDrain(ctx, ib, n, poison); err != nil {
			return err
		}
	}
	fmt.Println("| round | on (msg/s) | off (msg/s) | on/off |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	var ons, offs, ratios []float64
	for r := range ff.rounds {
		var on, of float64
		arms := []bool{true, false}
		if r%2 == 1 {
			arms = []bool{false, true}
		}
		for _, record := range arms {
			ib := b.ib
			if !record {
				ib = off
			}
			rate, err := b.poisonDrain(ctx, ib, n, poison)
			if err != nil {
				return err
			}
			if record {
				on = rate
			} else {
				of = rate
			}
		}
		ons, offs, ratios = append(ons, on), append(offs, of), append(ratios, on/of)
		fmt.Printf("| %d | %.0f | %.0f | %.3f |\n", r+1, on, of, on/of)
	}
	fmt.Printf("\nmedian (range): on %s msg/s, off %s msg/s; on/off per round %s; ratio of the medians %.3f\n",
		medianRange(ons), medianRange(offs), medianRange(ratios), median(ons)/median(offs))
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// poisonDrain drains a fresh queue of n messages, poison of which fail every time (and reach
// the DLQ after their third receive), with an inbox handler on ib, and returns the messages per
// second: until every good message is deleted and every poison one has failed 3 times.
func (b *bench) poisonDrain(ctx context.Context, ib *inbox.Inbox, n, poison int) (float64, error) {
	q, err := b.srv.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "benchfail", MaxReceiveCount: 3})
	if err != nil {
		return 0, err
	}
	r := b.nextRun()
	msgs := make([]sqstest.Message, n)
	step := n / poison
	for i := range msgs {
		kind := "order"
		if i%step == 0 && i/step < poison {
			kind = "poison"
		}
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":"f%d-%d","kind":%q,"amount":4200}`, r, i, kind)}
	}
	if err := sqstest.Send(ctx, b.sqs, q.URL, msgs); err != nil {
		return 0, err
	}
	boom := errors.New("poison: the order has no lines")
	h, err := inboxhandler.New(ib, fmt.Sprintf("fail-%d", r), nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		if strings.Contains(string(m.Body), `"poison"`) {
			return boom
		}
		key, _, _ := inbox.EventKey(ctx)
		return b.effect(ctx, tx, key)
	})
	if err != nil {
		return 0, err
	}
	var prog tracker
	met := &counts{prog: &prog}
	w, err := worker.New(b.sqs, &worker.Config{QueueURL: q.URL, Concurrency: ff.conc, WaitTime: time.Second, Handler: h, Metrics: met,
		Logger: b.log, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		return 0, err
	}
	good := int64(n - poison)
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	deadline := start.Add(runTimeout)
	for (met.deleted.Load() < good || met.failed.Load() < int64(3*poison)) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	el := time.Since(start)
	if err := w.Stop(ctx); err != nil {
		return 0, err
	}
	if d, f := met.deleted.Load(), met.failed.Load(); d < good || f < int64(3*poison) {
		return 0, fmt.Errorf("failure drain: %d of %d deleted, %d of %d failures in %v", d, good, f, 3*poison, runTimeout)
	}
	return float64(n) / el.Seconds(), nil
}

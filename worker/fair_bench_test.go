package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// Fair-queue bench (the fake, as a fair queue: QueueOptions.Fair; neither GoAws nor fauxqs
// returns a standard queue's MessageGroupId). Two tenants on one standard queue: a's backlog of
// fairBacklog messages whose handler takes 20 ms, and b, one message every 50 ms whose handler
// takes 1 ms (handler time is the workload, simulated by sleeping). Each round measures b's dwell
// (send to the handler's success) and the messages processed per second during the first
// fairWindow of a's backlog, with MaxPerGroup off and on, interleaved; an idle round (b alone)
// gives b's dwell without a backlog. Run it with
//
//	go test -run '^$' -bench BenchmarkFairQueue -benchtime 1x ./worker/
const (
	fairBacklog     = 20000
	fairWindow      = 8 * time.Second
	fairIdleWindow  = 4 * time.Second
	fairRounds      = 10
	fairConcurrency = 20
	fairCap         = 19
	fairSlowWork    = 20 * time.Millisecond
	fairFastWork    = time.Millisecond
	fairEvery       = 50 * time.Millisecond
)

type fairResult struct {
	p50, p99 time.Duration // b's dwell
	rate     float64       // messages processed per second, both tenants
	bCount   int
}

// fairRound runs one round: a's backlog (none when idle) and b's trickle for window, with
// MaxPerGroup maxPer.
func fairRound(b *testing.B, maxPer int, idle bool, window time.Duration) fairResult {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "fair", Fair: true})
	ctx := context.Background()
	if !idle {
		msgs := make([]sqstest.Message, fairBacklog)
		for i := range msgs {
			msgs[i] = sqstest.Message{Body: "a", GroupID: "a"}
		}
		if err := sqstest.Send(ctx, f, url, msgs); err != nil {
			b.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		dwells []time.Duration
		done   atomic.Int64
		begin  = time.Now()
		end    = begin.Add(window)
	)
	w, err := worker.New(f, &worker.Config{QueueURL: url, Concurrency: fairConcurrency, MaxPerGroup: maxPer, WaitTime: time.Second,
		Logger: discardLogger(),
		Handler: worker.HandlerFunc(func(_ context.Context, m *worker.Message) error {
			if m.GroupID == "a" {
				time.Sleep(fairSlowWork)
			} else {
				time.Sleep(fairFastWork)
				sent, _ := strconv.ParseInt(string(m.Body), 10, 64)
				if d := time.Since(time.Unix(0, sent)); time.Now().Before(end) {
					mu.Lock()
					dwells = append(dwells, d)
					mu.Unlock()
				}
			}
			if time.Now().Before(end) {
				done.Add(1)
			}
			return nil
		})})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	tick := time.NewTicker(fairEvery)
	for now := range tick.C {
		if now.After(end.Add(-200 * time.Millisecond)) { // the last ones' dwell fits in the window
			break
		}
		body := strconv.FormatInt(time.Now().UnixNano(), 10)
		if err := sqstest.Send(ctx, f, url, []sqstest.Message{{Body: body, GroupID: "b"}}); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	for time.Now().Before(end) {
		time.Sleep(10 * time.Millisecond) // the window's end: a duration to measure, not a condition
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.StopAndCancel(sctx); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(dwells)
	r := fairResult{rate: float64(done.Load()) / window.Seconds(), bCount: len(dwells)}
	if len(dwells) > 0 {
		r.p50 = dwells[len(dwells)/2]
		r.p99 = dwells[min(len(dwells)-1, len(dwells)*99/100)]
	}
	return r
}

func BenchmarkFairQueue(b *testing.B) {
	rounds := fairRounds
	if testing.Short() {
		rounds = 2
	}
	var idle, off, on []fairResult
	for range b.N {
		for i := range rounds {
			idle = append(idle, fairRound(b, fairCap, true, fairIdleWindow))
			if i%2 == 0 { // interleaved, and which goes first alternates
				off = append(off, fairRound(b, 0, false, fairWindow))
				on = append(on, fairRound(b, fairCap, false, fairWindow))
			} else {
				on = append(on, fairRound(b, fairCap, false, fairWindow))
				off = append(off, fairRound(b, 0, false, fairWindow))
			}
		}
	}
	medf := func(format string, rs []fairResult, get func(fairResult) float64) string {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return fmt.Sprintf(format+" ("+format+"–"+format+")", v[len(v)/2], v[0], v[len(v)-1])
	}
	med := func(rs []fairResult, get func(fairResult) float64) string { return medf("%.1f", rs, get) }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out := os.Stdout
	fmt.Fprintf(out, "\nfair queue: a %d × %v, b every %v × %v; concurrency %d; %d rounds, medians (min–max)\n",
		fairBacklog, fairSlowWork, fairEvery, fairFastWork, fairConcurrency, len(on))
	fmt.Fprintf(out, "| run | b p50 dwell ms | b p99 dwell ms | msgs/s (a+b) | b msgs/round |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		rs   []fairResult
	}{{"b alone (idle queue), MaxPerGroup " + strconv.Itoa(fairCap), idle}, {"a's backlog, MaxPerGroup 0 (off)", off},
		{"a's backlog, MaxPerGroup " + strconv.Itoa(fairCap), on}} {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", row.name,
			med(row.rs, func(r fairResult) float64 { return ms(r.p50) }), med(row.rs, func(r fairResult) float64 { return ms(r.p99) }),
			med(row.rs, func(r fairResult) float64 { return r.rate }), med(row.rs, func(r fairResult) float64 { return float64(r.bCount) }))
	}
	ratio := make([]fairResult, len(on))
	for i := range on {
		ratio[i] = fairResult{rate: on[i].rate / off[i].rate, p99: time.Duration(float64(on[i].p99) / float64(idle[i].p99) * float64(time.Millisecond))}
	}
	fmt.Fprintf(out, "throughput with the cap / without, per round pair: %s; b's p99 with the cap / idle: %s\n",
		medf("%.3f", ratio, func(r fairResult) float64 { return r.rate }), medf("%.2f", ratio, func(r fairResult) float64 { return ms(r.p99) }))
}

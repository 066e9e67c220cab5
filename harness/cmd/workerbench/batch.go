package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// batchFlags are the settings of the batched table: each list is tried in every combination
// (a cell), and the worker with HandlerBatch 1 runs at Concurrency -n1c with the prefetch of the
// cell it is compared with.
type batchFlags struct {
	sizes, concs, prefetch, pollers, lingers, rawPollers string
	n1c                                                  int
}

func (f *batchFlags) register() {
	flag.StringVar(&f.sizes, "batch", "", "batched table: Config.HandlerBatch values, comma-separated (empty skips the table)")
	flag.StringVar(&f.concs, "bc", "8", "batched table: Config.Concurrency values (batches in flight)")
	flag.StringVar(&f.prefetch, "prefetch", "0", "batched table: Config.Prefetch values (0: Concurrency x HandlerBatch, -1: none)")
	flag.StringVar(&f.pollers, "bpollers", "0", "batched table: Config.Pollers values (0: the default)")
	flag.StringVar(&f.lingers, "linger", "0", "batched table: Config.Linger values (0: 2 ms, -1ms: none)")
	flag.StringVar(&f.rawPollers, "rawpollers", "1,2,4,8", "batched table: poller counts of the raw drain (receive 10, DeleteMessageBatch); the best is the reference")
	flag.IntVar(&f.n1c, "n1c", 8, "batched table: Concurrency of the HandlerBatch=1 worker compared with the batched one (0 skips it)")
}

func (f *batchFlags) enabled() bool { return strings.TrimSpace(f.sizes) != "" }

func ints(s string) ([]int, error) {
	var out []int
	for _, v := range strings.Split(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("bad number %q in %q", v, s)
		}
		out = append(out, i)
	}
	return out, nil
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("bad duration %q in %q", v, s)
		}
		out = append(out, d)
	}
	return out, nil
}

// cells returns every combination of the batched table's settings.
func (f *batchFlags) cells() ([]workerOpts, error) {
	sizes, err := ints(f.sizes)
	if err != nil {
		return nil, err
	}
	concs, err := ints(f.concs)
	if err != nil {
		return nil, err
	}
	pre, err := ints(f.prefetch)
	if err != nil {
		return nil, err
	}
	pol, err := ints(f.pollers)
	if err != nil {
		return nil, err
	}
	lin, err := durations(f.lingers)
	if err != nil {
		return nil, err
	}
	var out []workerOpts
	for _, c := range concs {
		for _, n := range sizes {
			for _, p := range pre {
				for _, q := range pol {
					for _, l := range lin {
						if c < 1 || n < 1 || n > worker.MaxHandlerBatch || q < 0 {
							return nil, fmt.Errorf("bad cell: concurrency %d, batch %d, pollers %d", c, n, q)
						}
						out = append(out, workerOpts{c: c, batch: n, prefetch: p, pollers: q, linger: l})
					}
				}
			}
		}
	}
	return out, nil
}

// effective fills in the worker's defaults, as Config does, for the tables.
func (o workerOpts) effective() workerOpts {
	running := o.c * max(o.batch, 1)
	if o.prefetch == 0 {
		o.prefetch = running
	}
	if o.pollers == 0 {
		o.pollers = worker.DefaultPollers(o.c, max(o.batch, 1), worker.DefaultBatchSize)
	}
	if o.linger == 0 {
		o.linger = worker.DefaultLinger
	}
	return o
}

func (o workerOpts) String() string {
	e := o.effective()
	l := e.linger.String()
	if e.linger < 0 {
		l = "none"
	}
	return fmt.Sprintf("c=%d N=%d prefetch=%d pollers=%d linger=%s", e.c, max(e.batch, 1), max(e.prefetch, 0), e.pollers, l)
}

// tracker follows a run's progress: the longest time without any (from the start to the first
// message, between two, or from the last one to the end of an incomplete run).
type tracker struct {
	last, maxGap atomic.Int64 // unix nanoseconds; nanoseconds
}

func (p *tracker) start(t time.Time) { p.last.Store(t.UnixNano()) }

// tick records progress now.
func (p *tracker) tick() {
	if p == nil {
		return
	}
	now := time.Now().UnixNano()
	gap := now - p.last.Swap(now)
	for {
		m := p.maxGap.Load()
		if gap <= m || p.maxGap.CompareAndSwap(m, gap) {
			return
		}
	}
}

// end returns the run's progress: done of want, and the longest gap (an incomplete run's wait
// since its last progress counts as one).
func (p *tracker) end(done, want int) progress {
	if done < want {
		p.tick()
	}
	return progress{done: done, want: want, gap: time.Duration(p.maxGap.Load())}
}

// progress is how far a run got and its longest time without progress.
type progress struct {
	done, want int
	gap        time.Duration
}

// worst keeps the least complete progress and the longest gap of the runs seen.
type worst struct {
	runs, incomplete int
	gap              time.Duration
	what             string // the run with the longest gap
}

func (w *worst) see(what string, p progress) {
	w.runs++
	if p.done < p.want {
		w.incomplete++
	}
	if g := p.gap; g > w.gap {
		w.gap, w.what = g, what
	}
}

// inboxBatched runs n inbox transactions of size claims and inserts each (inbox.RunBatch, the
// same business write as the worker's) on c goroutines, and returns messages per second.
func (b *bench) inboxBatched(ctx context.Context, n, c, size int) (float64, progress, error) {
	var prog tracker
	r := b.nextRun()
	handler := fmt.Sprintf("inbox-batched-%d", r)
	var next, done atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	prog.start(start)
	for range c {
		wg.Go(func() {
			items := make([]inbox.Item, 0, size)
			for {
				hi := next.Add(int64(size))
				lo := hi - int64(size) + 1
				if lo > int64(n) {
					return
				}
				items = items[:0]
				for i := lo; i <= min(hi, int64(n)); i++ {
					key := fmt.Sprintf("r%d-%d", r, i)
					// What the worker's inbox handler records of each message, so that the
					// inbox alone pays for the columns as the worker's path does.
					d := inbox.Delivery{MessageID: fmt.Sprintf("%08x-0000-4000-8000-%012x", r, i), Queue: "bench", ReceiveCount: 1,
						TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
					items = append(items, inbox.Item{Handler: handler, Key: key, Delivery: d, Fn: func(ctx context.Context, tx pgx.Tx) error {
						return b.effect(ctx, tx, key)
					}})
				}
				res, _ := b.ib.RunBatch(ctx, items, nil)
				for _, x := range res {
					if x.Err != nil {
						firstErr.CompareAndSwap(nil, x.Err)
						return
					}
				}
				done.Add(int64(len(items)))
				prog.tick()
			}
		})
	}
	wg.Wait()
	pr := prog.end(int(done.Load()), n)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, pr, err
	}
	return float64(n) / time.Since(start).Seconds(), pr, nil
}

// batchCell is the best of a cell's repeats.
type batchCell struct {
	o           workerOpts
	inbox       float64 // inbox-only batched at the cell's Concurrency and HandlerBatch
	worker      workerRun
	fake, fake1 workerRun // the comparison cell only: the batched worker and HandlerBatch 1 on the fake
	n1          workerRun // the comparison cell only: HandlerBatch 1 at -n1c, same prefetch
}

// batched prints the batched table against the current server.
func (b *bench) batched(ctx context.Context, n, repeat int, want func(string) bool) error {
	cells, err := bf.cells()
	if err != nil {
		return err
	}
	rawPollers, err := ints(bf.rawPollers)
	if err != nil {
		return err
	}
	// The comparison with HandlerBatch 1 uses the first cell at Concurrency -n1c (or the first
	// cell's other settings at that Concurrency).
	cmpIdx := -1
	if bf.n1c > 0 {
		for i, o := range cells {
			if o.c == bf.n1c {
				cmpIdx = i
				break
			}
		}
		if cmpIdx < 0 {
			o := cells[0]
			o.c = bf.n1c
			cells = append(cells, o)
			cmpIdx = len(cells) - 1
		}
	}
	best := make([]batchCell, len(cells))
	for i := range best {
		best[i].o = cells[i]
	}
	rawBest := make([]float64, len(rawPollers))
	var w worst
	for rep := range repeat {
		if want("raw") {
			for i, p := range rawPollers {
				r, prog, err := b.rawDrain(ctx, b.sqs, n, p, 10)
				if err != nil {
					return err
				}
				w.see(fmt.Sprintf("raw drain, %d pollers, repeat %d", p, rep+1), prog)
				rawBest[i] = max(rawBest[i], r)
			}
		}
		inboxRates := map[[2]int]float64{}
		for i := range cells {
			o := cells[i]
			bc := &best[i]
			if want("inbox") {
				k := [2]int{o.c, o.batch}
				if _, ok := inboxRates[k]; !ok {
					r, prog, err := b.inboxBatched(ctx, n, o.c, o.batch)
					if err != nil {
						return err
					}
					w.see(fmt.Sprintf("inbox-only batched c=%d N=%d, repeat %d", o.c, o.batch, rep+1), prog)
					inboxRates[k] = r
				}
				bc.inbox = max(bc.inbox, inboxRates[k])
			}
			if want("goaws") {
				url, err := b.queue(ctx, n)
				if err != nil {
					return err
				}
				res, err := b.runWorkerOpts(ctx, b.sqs, url, n, o)
				if err != nil {
					return err
				}
				w.see(fmt.Sprintf("worker+%s %v, repeat %d", b.name, o, rep+1), res.prog)
				if res.rate > bc.worker.rate {
					bc.worker = res
				}
			}
			if i != cmpIdx {
				continue
			}
			n1 := workerOpts{c: bf.n1c, batch: 1, prefetch: o.effective().prefetch, pollers: o.pollers, linger: o.linger}
			if want("goaws") {
				url, err := b.queue(ctx, n)
				if err != nil {
					return err
				}
				res, err := b.runWorkerOpts(ctx, b.sqs, url, n, n1)
				if err != nil {
					return err
				}
				w.see(fmt.Sprintf("worker+%s %v, repeat %d", b.name, n1, rep+1), res.prog)
				if res.rate > bc.n1.rate {
					bc.n1 = res
				}
			}
			if want("fake") {
				for _, x := range []struct {
					o   workerOpts
					dst *workerRun
				}{{o, &bc.fake}, {n1, &bc.fake1}} {
					res, err := b.fakeOpts(ctx, n, x.o)
					if err != nil {
						return err
					}
					w.see(fmt.Sprintf("worker+fake %v, repeat %d", x.o, rep+1), res.prog)
					if res.rate > x.dst.rate {
						*x.dst = res
					}
				}
			}
		}
	}

	raw, rawAt := 0.0, 0
	for i, r := range rawBest {
		if r > raw {
			raw, rawAt = r, rawPollers[i]
		}
	}
	fmt.Printf("\nbatched inbox commits against %s: %d messages per cell, best of %d interleaved repeats\n", b.name, n, repeat)
	var rp []string
	for i, p := range rawPollers {
		rp = append(rp, fmt.Sprintf("%d: %.0f/s", p, rawBest[i]))
	}
	fmt.Printf("\nraw %s drain (ReceiveMessage 10, DeleteMessageBatch) by pollers: %s; best %.0f/s at %d\n\n", b.name, strings.Join(rp, ", "), raw, rawAt)
	fmt.Printf("| settings | raw drain (best) | inbox-only batched | worker+%s batched | ratio to min | msgs/batch | msgs/receive | held wait | handler/msg | CPU/msg worker | CPU/msg %s | CPU/msg PostgreSQL | CPU/msg total | allocs/msg |\n", b.name, b.name)
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, bc := range best {
		r := bc.worker
		fmt.Printf("| %v | %.0f/s | %.0f/s | %.0f/s | %.2f | %.1f | %.1f | %v | %v | %s |\n", bc.o, raw, bc.inbox, r.rate,
			r.rate/min(raw, bc.inbox), r.perCall, r.perRecv, r.held.Round(10*time.Microsecond), r.handler.Round(time.Microsecond), cpuCols(r))
	}
	if cmpIdx >= 0 {
		bc := best[cmpIdx]
		fmt.Printf("\nbatched against HandlerBatch 1 at Concurrency %d, same prefetch (%d)\n\n", bf.n1c, bc.o.effective().prefetch)
		fmt.Printf("| run | worker+%[1]s | handler/msg | CPU/msg worker | CPU/msg %[1]s | CPU/msg PostgreSQL | CPU/msg total | allocs/msg (%[1]s) | worker+fake | allocs/msg (fake) |\n", b.name)
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		n1 := workerOpts{c: bf.n1c, batch: 1, prefetch: bc.o.effective().prefetch, pollers: bc.o.pollers, linger: bc.o.linger}
		for _, x := range []struct {
			o       workerOpts
			r, f    workerRun
			caption string
		}{{bc.o, bc.worker, bc.fake, "batched"}, {n1, bc.n1, bc.fake1, "N=1"}} {
			fmt.Printf("| %s %v | %.0f/s | %v | %s | %.0f/s | %.0f |\n", x.caption, x.o, x.r.rate, x.r.handler.Round(time.Microsecond),
				cpuCols(x.r), x.f.rate, x.f.allocs)
		}
		fmt.Printf("\nbatched / N=1 at Concurrency %d: %.2f against %s, %.2f on the fake\n", bf.n1c,
			bc.worker.rate/bc.n1.rate, b.name, bc.fake.rate/bc.fake1.rate)
	}
	w.print(b.name)
	return nil
}

// print prints whether every run reached 100% and the longest gap without progress.
func (w *worst) print(server string) {
	status := "every run reached 100%"
	if w.incomplete > 0 {
		status = fmt.Sprintf("%d of %d runs did NOT reach 100%%", w.incomplete, w.runs)
	}
	fmt.Printf("\nprogress (%s): %s of its messages; longest gap without progress %v (%s)%s\n", server, status,
		w.gap.Round(time.Millisecond), w.what, map[bool]string{true: " -- 2 s OR MORE", false: ""}[w.gap >= 2*time.Second])
}

// cpuCols formats a run's CPU per message (worker, server, PostgreSQL, total) and its allocations.
func cpuCols(r workerRun) string {
	t := r.cpu.self + r.cpu.goaws + r.cpu.postgres
	return fmt.Sprintf("%v | %v | %v | %v | %.0f", r.cpu.self.Round(time.Microsecond), r.cpu.goaws.Round(time.Microsecond),
		r.cpu.postgres.Round(time.Microsecond), t.Round(time.Microsecond), r.allocs)
}

// fakeOpts runs a worker set up as o against the in-process fake.
func (b *bench) fakeOpts(ctx context.Context, n int, o workerOpts) (workerRun, error) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "bench"})
	if err := sqstest.Send(ctx, f, url, b.messages(n)); err != nil {
		return workerRun{}, err
	}
	return b.runWorkerOpts(ctx, f, url, n, o)
}

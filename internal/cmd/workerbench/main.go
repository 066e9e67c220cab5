// Command workerbench measures the worker end to end (receive, inbox transaction with one
// business write, delete) at several concurrencies, against GoAws and against the in-process
// fake, beside the two limits measured in the same run: the raw GoAws receive+delete rate and
// the inbox-only transaction rate. It prints a table of rates and ratios, allocations per
// message, and the worker's memory with 1,000 messages in flight. With -otel the worker runs
// traced (workerotel.Middleware and InboxHooks, every message sampled, spans batched to an
// exporter that drops them), to be compared with a run without it.
//
// It starts its own PostgreSQL (internal/pgtest: a throwaway cluster, or a fresh database on
// TEST_DATABASE_URL) and GoAws (internal/sqstest, or AWS_ENDPOINT_URL_SQS). Run it from the
// repository:
//
//	go run ./internal/cmd/workerbench -n 3000 -c 1,8,32,64
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/pgtest"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

func main() {
	n := flag.Int("n", 3000, "messages per measurement")
	cs := flag.String("c", "1,8,32,64", "concurrencies, comma-separated")
	inflight := flag.Int("inflight", 1000, "messages in flight for the memory measurement (0 skips it)")
	repeat := flag.Int("repeat", 1, "measure each cell this many times, interleaved, and keep each column's best (the machine is noisy)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.IntVar(&pollers, "pollers", 0, "worker.Config.Pollers (0: the default)")
	only := flag.String("only", "", "measure only these columns, comma-separated, for profiling: raw, inbox, goaws, fake, memory (ratios need all)")
	flag.BoolVar(&traced, "otel", false, "trace the worker runs (goaws, fake): workerotel.Middleware and InboxHooks on an SDK tracer provider that samples every message and drops the spans in its exporter")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *cs, *inflight, max(*repeat, 1), columns(*only)); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

const schema = "bench"

var (
	pollers int
	traced  bool
)

type bench struct {
	cpu  cpuMeter
	pool *pgxpool.Pool
	ib   *inbox.Inbox
	// otel is the worker runs' tracing under -otel (nil without): their inbox has its hooks.
	otel *benchTracing
	srv  *sqstest.Server
	sqs  *sqs.Client
	run  int
	log  *slog.Logger
}

// columns returns the set of columns -only names; empty means all.
func columns(only string) func(string) bool {
	if only == "" {
		return func(string) bool { return true }
	}
	set := map[string]bool{}
	for _, c := range strings.Split(only, ",") {
		set[strings.TrimSpace(c)] = true
	}
	return func(c string) bool { return set[c] }
}

func run(n int, csFlag string, inflight, repeat int, want func(string) bool) error {
	ctx := context.Background()
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	db, err := pgtest.Start(ctx, "workerbench")
	if err != nil {
		return err
	}
	defer db.Close()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 80
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.effects (event_id text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		return err
	}
	b := &bench{pool: pool, ib: ib, srv: srv, sqs: srv.Client(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		cpu: cpuMeter{goaws: srv.Pid(), postmaster: db.PostmasterPid()}}
	if traced {
		if b.otel, err = newBenchTracing(pool); err != nil {
			return err
		}
		defer b.otel.shutdown()
	}

	fmt.Printf("workerbench: %d messages per cell, best of %d, GOMAXPROCS %d, %s\n", n, repeat, runtime.GOMAXPROCS(0), loadavg())
	if b.otel != nil {
		fmt.Println("tracing: on (workerotel.Middleware and InboxHooks in the worker runs, every message sampled, spans dropped by the exporter)")
	}
	fmt.Printf("server: %s (GoAws %v)\n\n", srv.Endpoint, srv.GoAws)
	fmt.Println("| conc | raw GoAws recv+del | inbox only | worker+GoAws | ratio to min | ratio to shared-CPU bound | worker+fake | ratio to inbox | allocs/msg (fake) | allocs/msg (GoAws) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var slots, cpus []string
	for _, s := range strings.Split(csFlag, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			return fmt.Errorf("bad concurrency %q", s)
		}
		var raw, only float64
		var wg, wf workerRun // the best of the repeats, by rate
		for range repeat {
			var r, o float64
			var g, f workerRun
			var err error
			if want("raw") {
				if r, err = b.rawSQS(ctx, n, c); err != nil {
					return err
				}
			}
			if want("inbox") {
				if o, err = b.inboxOnly(ctx, n, c); err != nil {
					return err
				}
			}
			if want("goaws") {
				if g, err = b.workerGoAws(ctx, n, c); err != nil {
					return err
				}
			}
			if want("fake") {
				if f, err = b.workerFake(ctx, n, c); err != nil {
					return err
				}
			}
			raw, only = max(raw, r), max(only, o)
			if g.rate > wg.rate {
				wg = g
			}
			if f.rate > wf.rate {
				wf = f
			}
		}
		// GoAws, PostgreSQL and the worker share the CPUs: end to end, each message costs the CPU of
		// both limits, so 1/(1/raw + 1/inbox) bounds the rate when the machine is CPU-bound.
		shared := 1 / (1/raw + 1/only)
		fmt.Printf("| %d | %.0f/s | %.0f/s | %.0f/s | %.2f | %.2f | %.0f/s | %.2f | %.0f | %.0f |\n",
			c, raw, only, wg.rate, wg.rate/min(raw, only), wg.rate/shared, wf.rate, wf.rate/only, wf.allocs, wg.allocs)
		total := wg.cpu.self + wg.cpu.goaws + wg.cpu.postgres
		bound := float64(runtime.NumCPU()) / total.Seconds()
		cpus = append(cpus, fmt.Sprintf("| %d | %v | %v | %v | %v | %.0f/s | %.2f | %v | %v |", c,
			wg.cpu.self.Round(time.Microsecond), wg.cpu.goaws.Round(time.Microsecond), wg.cpu.postgres.Round(time.Microsecond),
			total.Round(time.Microsecond), bound, wg.rate/bound,
			wf.cpu.self.Round(time.Microsecond), wf.cpu.postgres.Round(time.Microsecond)))
		slots = append(slots, fmt.Sprintf("| %d | %v | %v | %.2f | %v | %v | %.2f |", c,
			wg.handler.Round(time.Microsecond), wg.receive.Round(time.Microsecond), wg.slotUse,
			wf.handler.Round(time.Microsecond), wf.receive.Round(time.Microsecond), wf.slotUse))
	}
	// Without prefetch (a receive asks only for slots free now), a slot waits out one receive
	// call between two handlers: slot use is about handler / (handler + receive + gathering).
	fmt.Println("\nwhere the slots' time goes (the best run of each cell): mean handler (inbox transaction), mean ReceiveMessage call that returned messages, and the share of the Concurrency slots running a handler")
	fmt.Println("\n| conc | handler (GoAws) | receive call (GoAws) | slot use (GoAws) | handler (fake) | receive call (fake) | slot use (fake) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range slots {
		fmt.Println(l)
	}
	// With the CPU each message costs the three processes, the machine's cores bound the rate;
	// a share well under 1 means the run waited on latency, not on CPU.
	fmt.Printf("\nCPU per message in the worker runs (from /proc, %d ms resolution), and the rate the machine's %d cores would allow at that cost\n",
		clockTick/time.Millisecond, runtime.NumCPU())
	fmt.Println("\n| conc | worker process (GoAws) | GoAws | PostgreSQL (GoAws) | total (GoAws) | CPU bound (GoAws) | worker+GoAws / CPU bound | worker process (fake) | PostgreSQL (fake) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range cpus {
		fmt.Println(l)
	}
	if inflight > 0 && want("memory") {
		bytes, gor, err := memoryInFlight(ctx, inflight)
		if err != nil {
			return err
		}
		fmt.Printf("\nmemory with %d messages in flight (fake, handlers blocked, no database): %.2f MiB live heap and stacks, %.2f KiB and %.1f goroutines per message\n",
			inflight, float64(bytes)/(1<<20), float64(bytes)/float64(inflight)/1024, float64(gor)/float64(inflight))
	}
	fmt.Printf("\nload at the end: %s\n", loadavg())
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(b))
	return "load average " + strings.Join(f[:3], " ")
}

func (b *bench) nextRun() int { b.run++; return b.run }

func (b *bench) messages(n int) []sqstest.Message {
	r := b.nextRun()
	msgs := make([]sqstest.Message, n)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":"r%d-%d","order":"o-%d","amount":4200}`, r, i, i)}
	}
	return msgs
}

func (b *bench) queue(ctx context.Context, n int) (string, error) {
	q, err := b.srv.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "bench"})
	if err != nil {
		return "", err
	}
	return q.URL, sqstest.Send(ctx, b.sqs, q.URL, b.messages(n))
}

// rawSQS drains n messages with plain receive + DeleteMessageBatch loops shaped like the
// worker's pollers at concurrency c.
func (b *bench) rawSQS(ctx context.Context, n, c int) (float64, error) {
	url, err := b.queue(ctx, n)
	if err != nil {
		return 0, err
	}
	pollers := min((c+9)/10, worker.DefaultMaxPollers)
	batch := int32(min(c, 10))
	var done atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(n) {
				out, err := b.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: batch,
					WaitTimeSeconds: 1}, worker.PlainRequestBodies)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := b.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries},
					worker.PlainRequestBodies); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(int64(len(out.Messages)))
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func (b *bench) effect(ctx context.Context, tx pgx.Tx, key string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects (event_id) VALUES ($1)`, key)
	return err
}

// inboxOnly runs n inbox transactions (claim and one insert) on c goroutines.
func (b *bench) inboxOnly(ctx context.Context, n, c int) (float64, error) {
	r := b.nextRun()
	handler := fmt.Sprintf("inbox-only-%d", r)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				key := fmt.Sprintf("r%d-%d", r, i)
				if _, err := b.ib.Run(ctx, handler, key, func(ctx context.Context, tx pgx.Tx) error {
					return b.effect(ctx, tx, key)
				}); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// workerRun is what one worker measurement found.
type workerRun struct {
	rate    float64       // messages per second
	allocs  float64       // allocations per message
	handler time.Duration // mean handler time (the inbox transaction)
	receive time.Duration // mean time of a ReceiveMessage call that returned messages
	slotUse float64       // mean share of the Concurrency slots running a handler
	cpu     cpuTimes      // CPU time per message of the worker's process, GoAws and PostgreSQL
}

type counts struct{ deleted, failed, handlerSum, handlerN atomic.Int64 }

func (c *counts) Add(k worker.Counter, n int) {
	switch k {
	case worker.Deleted:
		c.deleted.Add(int64(n))
	case worker.Failed:
		c.failed.Add(int64(n))
	}
}
func (c *counts) Observe(h worker.Histogram, d time.Duration) {
	if h == worker.HandlerDuration {
		c.handlerSum.Add(int64(d))
		c.handlerN.Add(1)
	}
}
func (c *counts) SetInFlight(int) {}

// timedClient times the ReceiveMessage calls that return messages.
type timedClient struct {
	worker.SQSClient
	sum, n atomic.Int64
}

func (t *timedClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	start := time.Now()
	out, err := t.SQSClient.ReceiveMessage(ctx, in, optFns...)
	if err == nil && len(out.Messages) > 0 {
		t.sum.Add(int64(time.Since(start)))
		t.n.Add(1)
	}
	return out, err
}

// runWorker drains n messages from url with a worker at concurrency c.
func (b *bench) runWorker(ctx context.Context, sqsClient worker.SQSClient, url string, n, c int) (workerRun, error) {
	var res workerRun
	client := &timedClient{SQSClient: sqsClient}
	ib := b.ib
	if b.otel != nil {
		ib = b.otel.ib
	}
	var h worker.Handler
	h, err := inboxhandler.New(ib, fmt.Sprintf("worker-%d", b.nextRun()), nil,
		func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			key, _, _ := inbox.EventKey(ctx)
			return b.effect(ctx, tx, key)
		})
	if err != nil {
		return res, err
	}
	if b.otel != nil {
		h = b.otel.wrap(url, h)
	}
	met := &counts{}
	w, err := worker.New(client, &worker.Config{QueueURL: url, Concurrency: c, WaitTime: time.Second, Pollers: pollers,
		Handler: h, Metrics: met, Logger: b.log})
	if err != nil {
		return res, err
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := b.cpu.read()
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return res, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for met.deleted.Load() < int64(n) {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("worker drained only %d of %d messages in 5 minutes (%d failures)", met.deleted.Load(), n, met.failed.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
	el := time.Since(start)
	used := b.cpu.read().sub(cpu0)
	runtime.ReadMemStats(&m1)
	if err := w.Stop(ctx); err != nil {
		return res, err
	}
	res.rate = float64(n) / el.Seconds()
	res.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(n)
	res.handler = time.Duration(met.handlerSum.Load() / max(met.handlerN.Load(), 1))
	res.receive = time.Duration(client.sum.Load() / max(client.n.Load(), 1))
	res.slotUse = res.rate * res.handler.Seconds() / float64(c)
	per := time.Duration(n)
	res.cpu = cpuTimes{used.self / per, used.goaws / per, used.postgres / per}
	return res, nil
}

func (b *bench) workerGoAws(ctx context.Context, n, c int) (workerRun, error) {
	url, err := b.queue(ctx, n)
	if err != nil {
		return workerRun{}, err
	}
	return b.runWorker(ctx, b.sqs, url, n, c)
}

func (b *bench) workerFake(ctx context.Context, n, c int) (workerRun, error) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "bench"})
	if err := sqstest.Send(ctx, f, url, b.messages(n)); err != nil {
		return workerRun{}, err
	}
	return b.runWorker(ctx, f, url, n, c)
}

// memoryInFlight measures the heap and goroutines of a worker holding k messages in flight (on
// the fake, with blocked handlers and no database).
func memoryInFlight(ctx context.Context, k int) (int64, int, error) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "mem", VisibilityTimeout: time.Hour})
	msgs := make([]sqstest.Message, k)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":"m-%d","order":"o-%d","amount":4200}`, i, i)}
	}
	if err := sqstest.Send(ctx, f, url, msgs); err != nil {
		return 0, 0, err
	}
	release := make(chan struct{})
	w, err := worker.New(f, &worker.Config{QueueURL: url, Concurrency: k, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			<-release
			return nil
		})})
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	if err := w.Start(ctx); err != nil {
		return 0, 0, err
	}
	for w.InFlight() < k {
		time.Sleep(5 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	close(release)
	if err := w.Stop(ctx); err != nil {
		return 0, 0, err
	}
	live := func(m *runtime.MemStats) int64 { return int64(m.HeapAlloc) + int64(m.StackInuse) }
	return live(&m1) - live(&m0), g1 - g0, nil
}

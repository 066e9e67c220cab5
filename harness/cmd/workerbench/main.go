// Command workerbench measures the worker end to end (receive, inbox transaction with one
// business write, delete) at several concurrencies, against GoAws and against the in-process
// fake, beside the two limits measured in the same run: the raw GoAws receive+delete rate and
// the inbox-only transaction rate. It prints a table of rates and ratios, allocations per
// message, and the worker's memory with 1,000 messages in flight. With -otel the worker runs
// traced (workerotel.Middleware and InboxHooks, every message sampled, spans batched to an
// exporter that drops them), to be compared with a run without it.
//
// With -batch it also measures batched inbox commits (batch.go): the worker with
// Config.HandlerBatch at the settings given, beside the raw receive+delete drain of the same
// server at its best poller count and the inbox-only rate of the same batched transactions
// (inbox.RunBatch), and the same worker with HandlerBatch 1 at Concurrency 8.
//
// It starts its own PostgreSQL (harness/pgtest: a throwaway cluster, or a fresh database on
// TEST_DATABASE_URL) and SQS server (harness/sqstest: GoAws, or fauxqs with
// SQSINBOX_TEST_SQS=fauxqs or -sqs fauxqs; or AWS_ENDPOINT_URL_SQS). -sqs goaws,fauxqs runs every
// table against each server in turn, on the same PostgreSQL. Run it from the repository:
//
//	go run ./harness/cmd/workerbench -n 3000 -c 1,8,32,64
//	go run ./harness/cmd/workerbench -n 3000 -c '' -sqs goaws,fauxqs -batch 10 -bc 4,8 -repeat 2
//
// With -failures R it measures what recording handler failures costs (failures.go): R rounds,
// each a drain with 1% (-poison) of the messages failing, with the inbox's failure records on
// and off, in alternating order, with the medians and ranges of both and of their ratio:
//
//	go run ./harness/cmd/workerbench -n 2000 -c '' -inflight 0 -failures 10
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
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

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/proccpu"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
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
	flag.StringVar(&servers, "sqs", "", "SQS servers to run against in turn, comma-separated: goaws, fauxqs (empty: the one SQSINBOX_TEST_SQS or AWS_ENDPOINT_URL_SQS names, GoAws by default)")
	flag.StringVar(&memprofile, "memprofile", "", "write a heap profile (every allocation sampled) of the memory measurement, taken with the messages in flight, to this file")
	flag.StringVar(&allocProfile, "allocprofile", "", "sample every allocation and write the allocations profile before and after the first worker run's drain to FILE.before and FILE.after (compare with go tool pprof -sample_index=alloc_objects -diff_base FILE.before FILE.after)")
	flag.DurationVar(&runTimeout, "timeout", 5*time.Minute, "the longest one worker run may take to drain its messages")
	bf.register()
	lf.register()
	ldf.register()
	ff.register()
	memChild := flag.Int("memory-child", 0, "internal: measure only the memory with this many messages in flight, in this process, and print it as one line (the memory column runs itself this way, in a fresh process)")
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
	if allocProfile != "" {
		runtime.MemProfileRate = 1
	}
	if *memChild > 0 {
		if err := memoryChild(*memChild); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(*n, *cs, *inflight, max(*repeat, 1), columns(*only)); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

const schema = "bench"

var (
	pollers    int
	traced     bool
	servers    string
	runTimeout time.Duration
	memprofile string
	// allocProfile is -allocprofile; allocProfiled says the first worker run has written it.
	allocProfile  string
	allocProfiled bool
	bf            batchFlags
)

type bench struct {
	cpu  cpuMeter
	pool *pgxpool.Pool
	ib   *inbox.Inbox
	// otel is the worker runs' tracing under -otel (nil without): their inbox has its hooks.
	otel *benchTracing
	srv  *sqstest.Server
	sqs  *sqs.Client
	name string // the SQS server's name in the tables: GoAws, fauxqs, SQS
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
	b := &bench{pool: pool, ib: ib, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		cpu: cpuMeter{postmaster: db.PostmasterPid()}}
	if traced {
		if b.otel, err = newBenchTracing(pool); err != nil {
			return err
		}
		defer b.otel.shutdown()
	}

	fmt.Printf("workerbench: %d messages per cell, best of %d, GOMAXPROCS %d, %d CPUs, %s, %s\n", n, repeat,
		runtime.GOMAXPROCS(0), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadavg())
	if b.otel != nil {
		fmt.Println("tracing: on (workerotel.Middleware and InboxHooks in the worker runs, every message sampled, spans dropped by the exporter)")
	}
	kinds := []string{""}
	if servers != "" {
		kinds = strings.Split(servers, ",")
	}
	for _, kind := range kinds {
		if err := b.withServer(ctx, strings.TrimSpace(kind), func() error {
			if strings.TrimSpace(csFlag) != "" {
				if err := b.classic(ctx, n, csFlag, repeat, want); err != nil {
					return err
				}
			}
			if bf.enabled() {
				if err := b.batched(ctx, n, repeat, want); err != nil {
					return err
				}
			}
			if strings.TrimSpace(lf.sqs) != "" {
				if err := b.latencyTable(ctx, n); err != nil {
					return err
				}
			}
			if ldf.idle > 0 {
				if err := b.idleRequests(ctx, ldf.idle); err != nil {
					return err
				}
			}
			if ldf.load != "" {
				if err := b.loadTable(ctx, n); err != nil {
					return err
				}
			}
			if peerRequests > 0 {
				if err := b.peersTable(ctx, peerRequests); err != nil {
					return err
				}
			}
			if ff.rounds > 0 {
				if err := b.failuresTable(ctx, n); err != nil {
					return err
				}
			}
			if lf.share > 0 {
				return b.share(ctx, n, lf.share)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if inflight > 0 && want("memory") {
		heap, stacks, gor, err := memoryFresh(ctx, inflight)
		if err != nil {
			return err
		}
		bytes := heap + stacks
		fmt.Printf("\nmemory with %d messages in flight (fake, handlers blocked, no database): %.2f MiB live heap and stacks (heap %.2f MiB, stacks %.2f MiB), %.2f KiB and %.1f goroutines per message\n",
			inflight, float64(bytes)/(1<<20), float64(heap)/(1<<20), float64(stacks)/(1<<20), float64(bytes)/float64(inflight)/1024, float64(gor)/float64(inflight))
	}
	fmt.Printf("\nload at the end: %s\n", loadavg())
	return nil
}

// withServer starts the SQS server of kind (goaws, fauxqs; empty: the one the environment
// names), points the bench at it, runs f and stops the server.
func (b *bench) withServer(ctx context.Context, kind string, f func() error) error {
	if kind != "" {
		if err := os.Setenv(sqstest.EnvServer, kind); err != nil {
			return err
		}
	}
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	b.srv, b.sqs, b.cpu.goaws = srv, srv.Client(), srv.Pid()
	b.name = map[sqstest.Kind]string{sqstest.KindGoAws: "GoAws", sqstest.KindFauxqs: "fauxqs"}[srv.Kind]
	if b.name == "" {
		b.name = "SQS"
	}
	fmt.Printf("\nserver: %s at %s (pid %d)\n\n", b.name, srv.Endpoint, srv.Pid())
	return f()
}

// classic prints the tables of the worker at the concurrencies of csFlag with its default
// settings, beside the raw drain and the inbox-only rate shaped like it.
func (b *bench) classic(ctx context.Context, n int, csFlag string, repeat int, want func(string) bool) error {
	fmt.Printf("| conc | raw %[1]s recv+del | inbox only | worker+%[1]s | ratio to min | ratio to shared-CPU bound | worker+fake | ratio to inbox | allocs/msg (fake) | allocs/msg (%[1]s) |\n", b.name)
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
	fmt.Printf("\n| conc | handler (%[1]s) | receive call (%[1]s) | slot use (%[1]s) | handler (fake) | receive call (fake) | slot use (fake) |\n", b.name)
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range slots {
		fmt.Println(l)
	}
	// With the CPU each message costs the three processes, the machine's cores bound the rate;
	// a share well under 1 means the run waited on latency, not on CPU.
	fmt.Printf("\nCPU per message in the worker runs (from /proc, %d ms resolution), and the rate the machine's %d cores would allow at that cost\n",
		proccpu.ClockTick/time.Millisecond, runtime.NumCPU())
	fmt.Printf("\n| conc | worker process (%[1]s) | %[1]s | PostgreSQL (%[1]s) | total (%[1]s) | CPU bound (%[1]s) | worker+%[1]s / CPU bound | worker process (fake) | PostgreSQL (fake) |\n", b.name)
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range cpus {
		fmt.Println(l)
	}
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
	rate, _, err := b.rawDrain(ctx, b.sqs, n, min((c+9)/10, worker.DefaultMaxPollers), min(c, 10))
	return rate, err
}

// rawDrain drains n messages with pollers loops of ReceiveMessage (up to batch messages) and
// DeleteMessageBatch through client, and returns the rate and the progress it made.
func (b *bench) rawDrain(ctx context.Context, client worker.SQSClient, n, pollers, batch int) (float64, progress, error) {
	var prog tracker
	url, err := b.queue(ctx, n)
	if err != nil {
		return 0, progress{}, err
	}
	var done, finished atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	prog.start(start)
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(n) {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: int32(batch),
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
				if _, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries},
					worker.PlainRequestBodies); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if done.Add(int64(len(out.Messages))) >= int64(n) {
					// The drain ends here: the other pollers may still wait out a long poll
					// on the empty queue, which is not part of it.
					finished.CompareAndSwap(0, int64(time.Since(start)))
				}
				prog.tick()
			}
		}()
	}
	wg.Wait()
	pr := prog.end(int(done.Load()), n)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, pr, err
	}
	return float64(n) / time.Duration(finished.Load()).Seconds(), pr, nil
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
	perCall float64       // messages per handler call (a batch, or one)
	perRecv float64       // messages per ReceiveMessage call (empty ones included)
	held    time.Duration // mean wait of a received message for a handler (Config.Prefetch)
	prog    progress
	end     worker.State // the worker's state at the end of the run (its pollers and capacity)
}

type counts struct {
	deleted, failed, handlerSum, handlerN, batches, batched, heldSum, heldN atomic.Int64
	prog                                                                    *tracker
}

func (c *counts) Add(k worker.Counter, n int) {
	switch k {
	case worker.Deleted:
		c.deleted.Add(int64(n))
		c.prog.tick()
	case worker.Failed:
		c.failed.Add(int64(n))
	case worker.Batches:
		c.batches.Add(int64(n))
	case worker.BatchedMessages:
		c.batched.Add(int64(n))
	}
}
func (c *counts) Observe(h worker.Histogram, d time.Duration) {
	switch h {
	case worker.HandlerDuration:
		c.handlerSum.Add(int64(d))
		c.handlerN.Add(1)
	case worker.HeldWait:
		c.heldSum.Add(int64(d))
		c.heldN.Add(1)
	}
}
func (c *counts) SetInFlight(int) {}

// timedClient times the ReceiveMessage calls that return messages.
type timedClient struct {
	worker.SQSClient
	sum, n, calls, msgs atomic.Int64
}

// Options returns the wrapped client's options, as *sqs.Client's method does, so that the worker
// treats the wrapper as the client it wraps (it has an *sqs.Client's default HTTP client keep more
// idle connections); sqs.Options{} for a client without them (the fake).
func (t *timedClient) Options() sqs.Options {
	if oc, ok := t.SQSClient.(interface{ Options() sqs.Options }); ok {
		return oc.Options()
	}
	return sqs.Options{}
}

func (t *timedClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	start := time.Now()
	out, err := t.SQSClient.ReceiveMessage(ctx, in, optFns...)
	t.calls.Add(1)
	if err == nil {
		t.msgs.Add(int64(len(out.Messages)))
	}
	if err == nil && len(out.Messages) > 0 {
		t.sum.Add(int64(time.Since(start)))
		t.n.Add(1)
	}
	return out, err
}

// workerOpts are the worker settings of a run; zero values are the worker's defaults.
type workerOpts struct {
	c, batch, prefetch, pollers int
	linger                      time.Duration
	ib                          *inbox.Inbox  // nil: the bench's (its pool goes to PostgreSQL directly)
	wait                        time.Duration // Config.WaitTime; 0: 1 s
	rec                         *latRec       // nil, or records each message's commit
	started                     func()        // nil, or called once the worker has started
}

// runWorker drains n messages from url with a worker at concurrency c and the -pollers flag's
// pollers.
func (b *bench) runWorker(ctx context.Context, sqsClient worker.SQSClient, url string, n, c int) (workerRun, error) {
	res, err := b.runWorkerOpts(ctx, sqsClient, url, n, workerOpts{c: c, pollers: pollers})
	if err == nil && res.prog.done < n {
		err = fmt.Errorf("worker drained only %d of %d messages in %v", res.prog.done, n, runTimeout)
	}
	return res, err
}

// runWorkerOpts drains n messages from url with a worker set up as o. A run that has not drained
// them within -timeout stops there: its progress says how far it got.
func (b *bench) runWorkerOpts(ctx context.Context, sqsClient worker.SQSClient, url string, n int, o workerOpts) (workerRun, error) {
	var res workerRun
	client := &timedClient{SQSClient: sqsClient}
	ib := b.ib
	if o.ib != nil {
		ib = o.ib
	}
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
	if o.rec != nil {
		h = o.rec.wrap(h)
	}
	wait := o.wait
	if wait == 0 {
		wait = time.Second
	}
	var prog tracker
	met := &counts{prog: &prog}
	w, err := worker.New(client, &worker.Config{QueueURL: url, Concurrency: o.c, WaitTime: wait, Pollers: o.pollers,
		HandlerBatch: o.batch, Prefetch: o.prefetch, Linger: o.linger, Handler: h, Metrics: met, Logger: b.log})
	if err != nil {
		return res, err
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	profiled := allocProfile != "" && !allocProfiled
	if profiled {
		allocProfiled = true
		if err := writeProfile("allocs", allocProfile+".before"); err != nil {
			return res, err
		}
	}
	cpu0 := b.cpu.read()
	start := time.Now()
	prog.start(start)
	if err := w.Start(ctx); err != nil {
		return res, err
	}
	if o.started != nil {
		o.started()
	}
	deadline := start.Add(runTimeout)
	for met.deleted.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	el := time.Since(start)
	deleted := int(met.deleted.Load())
	res.prog = prog.end(deleted, n)
	used := b.cpu.read().sub(cpu0)
	runtime.ReadMemStats(&m1)
	if profiled {
		if err := writeProfile("allocs", allocProfile+".after"); err != nil {
			return res, err
		}
	}
	res.end = w.State()
	if err := w.Stop(ctx); err != nil {
		return res, err
	}
	n = max(min(deleted, n), 1)
	res.rate = float64(n) / el.Seconds()
	res.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(n)
	res.perCall = 1
	if k := met.batches.Load(); k > 0 {
		res.perCall = float64(met.batched.Load()) / float64(k)
	}
	res.held = time.Duration(met.heldSum.Load() / max(met.heldN.Load(), 1))
	res.perRecv = float64(client.msgs.Load()) / float64(max(client.calls.Load(), 1))
	res.handler = time.Duration(met.handlerSum.Load() / max(met.handlerN.Load(), 1))
	res.receive = time.Duration(client.sum.Load() / max(client.n.Load(), 1))
	// A batch runs its messages one after another: a slot's busy time is its messages' handlers.
	res.slotUse = res.rate * res.handler.Seconds() / float64(max(o.c, 1))
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

// memoryFresh runs memoryInFlight in a fresh process (this binary with -memory-child) and
// returns what it measured. In the process that ran the other columns, the figure depends on
// what they ran: a new goroutine's first stack is sized from the average stack the collector
// last scanned, and stacks freed earlier are reused without counting as new; the same build
// measured from 4.5 to 6.7 MiB with the tables it ran before.
func memoryFresh(ctx context.Context, k int) (heap, stacks int64, goroutines int, err error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, 0, err
	}
	args := []string{"-memory-child", strconv.Itoa(k)}
	if memprofile != "" {
		args = append(args, "-memprofile", memprofile)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("the memory measurement's process: %w", err)
	}
	if _, err := fmt.Sscanf(string(out), "memory %d %d %d", &heap, &stacks, &goroutines); err != nil {
		return 0, 0, 0, fmt.Errorf("the memory measurement's process printed %q: %w", out, err)
	}
	return heap, stacks, goroutines, nil
}

// memoryChild is the process memoryFresh starts: it measures and prints one line.
func memoryChild(k int) error {
	heap, stacks, gor, err := memoryInFlight(context.Background(), k)
	if err != nil {
		return err
	}
	fmt.Printf("memory %d %d %d\n", heap, stacks, gor)
	return nil
}

// memoryInFlight measures the heap and goroutines of a worker holding k messages in flight (on
// the fake, with blocked handlers and no database).
func memoryInFlight(ctx context.Context, k int) (heap, stacks int64, goroutines int, err error) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "mem", VisibilityTimeout: time.Hour})
	msgs := make([]sqstest.Message, k)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":"m-%d","order":"o-%d","amount":4200}`, i, i)}
	}
	if err := sqstest.Send(ctx, f, url, msgs); err != nil {
		return 0, 0, 0, err
	}
	release := make(chan struct{})
	w, err := worker.New(f, &worker.Config{QueueURL: url, Concurrency: k, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			<-release
			return nil
		})})
	if err != nil {
		return 0, 0, 0, err
	}
	if memprofile != "" {
		runtime.MemProfileRate = 1
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	if err := w.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	for w.InFlight() < k {
		time.Sleep(5 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	if memprofile != "" {
		if err := writeProfile("heap", memprofile); err != nil {
			return 0, 0, 0, err
		}
	}
	close(release)
	if err := w.Stop(ctx); err != nil {
		return 0, 0, 0, err
	}
	return int64(m1.HeapAlloc) - int64(m0.HeapAlloc), int64(m1.StackInuse) - int64(m0.StackInuse), g1 - g0, nil
}

// writeProfile writes the runtime profile name (heap, allocs) to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

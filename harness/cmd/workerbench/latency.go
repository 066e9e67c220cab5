package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"slices"
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

	"github.com/sqsinbox/sqsinbox/harness/latency"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// The latency table: the worker at its defaults, and the frozen reference at its best
// parallelism, with SQS and PostgreSQL each behind a proxy that adds a round-trip time
// (harness/latency), as in AWS (SQS 5 to 30 ms away, RDS in the zone about 1 ms).
type latFlags struct {
	sqs, pg, refc    string
	share, c, rounds int
	detail           bool
}

var lf latFlags

func (f *latFlags) register() {
	flag.StringVar(&f.sqs, "lat-sqs", "", "latency table: round-trip times added to SQS, in ms, comma-separated (empty skips the table), e.g. 0,5,20,50")
	flag.StringVar(&f.pg, "lat-pg", "0,1", "latency table: round-trip times added to PostgreSQL, in ms")
	flag.StringVar(&f.refc, "refc", "4,16,64", "latency table: parallelism of the frozen reference loop; the best is its rate (0: no reference)")
	flag.IntVar(&f.c, "lat-c", 0, "latency table: the worker's Concurrency (0: its default, sized)")
	flag.IntVar(&f.rounds, "lat-rounds", 1, "latency table: run the whole table this many times, one round after another, then print each cell's median ratios and their range")
	flag.BoolVar(&f.detail, "lat-detail", false, "latency table: print, under each worker run, where its time went (messages per receive and per batch, mean receive, wait for a handler and the time of a message's handler)")
	flag.IntVar(&f.share, "share", 0, "start this many workers at their defaults together on one queue of -n messages and print each one's share (0 skips it)")
}

func msList(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, v := range strings.Split(s, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("bad latency %q in %q", v, s)
		}
		out = append(out, time.Duration(f*float64(time.Millisecond)))
	}
	return out, nil
}

// delays parses the SQS and PostgreSQL round-trip lists of a table.
func delays(sqsList, pgList string) (sqsDelays, pgDelays []time.Duration, err error) {
	if sqsDelays, err = msList(sqsList); err != nil {
		return nil, nil, err
	}
	pgDelays, err = msList(pgList)
	return sqsDelays, pgDelays, err
}

// latencyTable prints, per cell of the added latencies, the worker's rate at its defaults and the
// frozen reference's at its best parallelism, with their CPU per message and the machine's CPU use.
func (b *bench) latencyTable(ctx context.Context, n int) error {
	sqsDelays, pgDelays, err := delays(lf.sqs, lf.pg)
	if err != nil {
		return err
	}
	refcs, err := ints(lf.refc)
	if err != nil {
		return err
	}
	px, err := b.startProxies(ctx, nil)
	if err != nil {
		return err
	}
	defer px.close()
	sp, pp, sqsProxied, poolProxied, ibProxied := px.sqs, px.pg, px.sqsClient, px.pool, px.ib
	fmt.Printf("\nlatency: SQS and PostgreSQL behind delaying proxies (round trips added; a cell with 0 goes direct); %d messages per run; the worker at its defaults, the frozen reference (receive 10, one transaction with a savepoint, claim and insert per message, DeleteMessageBatch; N loops) at its best N of %s\n\n", n, lf.refc)
	type cell struct{ sd, pd time.Duration }
	var wst worst // the worker runs' progress
	own, vsRef, vsRaw, cpuRatio := map[cell][]float64{}, map[cell][]float64{}, map[cell][]float64{}, map[cell][]float64{}
	for round := range max(lf.rounds, 1) {
		if lf.rounds > 1 {
			fmt.Printf("\nround %d of %d\n\n", round+1, lf.rounds)
		}
		fmt.Printf("| SQS RTT | PG RTT | worker | worker / its 0+0 rate | reference (best N) | worker / reference | raw SQS drain (best N) | worker / raw | CPU/msg worker | CPU/msg reference | machine CPU, cores (worker run) | the worker's pollers, concurrency, capacity at the end |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var base float64
		for _, sd := range sqsDelays {
			sp.SetRTT(sd, 0)
			client := worker.SQSClient(b.sqs)
			if sd > 0 {
				client = sqsProxied
			}
			// The server's own rate through the same route: receive 10 and DeleteMessageBatch,
			// no database, at the reference's parallelisms. A cell's ceiling when the server or
			// the route is the limit.
			var raw refRun
			for _, c := range refcs {
				if c <= 0 {
					continue
				}
				r, _, err := b.rawDrain(ctx, client, n, c, 10)
				if err != nil {
					return err
				}
				if r > raw.rate {
					raw = refRun{rate: r, c: c}
				}
			}
			for _, pd := range pgDelays {
				pp.SetRTT(pd, 0)
				pool, ib := b.pool, b.ib
				if pd > 0 {
					pool, ib = poolProxied, ibProxied
				}
				url, err := b.queue(ctx, n)
				if err != nil {
					return err
				}
				w, err := b.runWorkerOpts(ctx, client, url, n, workerOpts{ib: ib, pollers: pollers, c: lf.c})
				if err != nil {
					return err
				}
				if w.prog.done < n {
					return fmt.Errorf("the worker drained only %d of %d messages at SQS %v, PostgreSQL %v", w.prog.done, n, sd, pd)
				}
				wst.see(fmt.Sprintf("worker, SQS %v, PostgreSQL %v", sd, pd), w.prog)
				if sd == 0 && pd == 0 {
					base = w.rate
				}
				var best refRun
				for _, c := range refcs {
					if c <= 0 {
						continue // -refc 0: no reference (scripts/bench-ab.sh's latency mode)
					}
					url, err := b.queue(ctx, n)
					if err != nil {
						return err
					}
					r, err := b.reference(ctx, client, pool, url, n, c, nil)
					if err != nil {
						return err
					}
					if r.rate > best.rate {
						best = r
					}
				}
				share := "-"
				if base > 0 {
					share = fmt.Sprintf("%.2f", w.rate/base)
					own[cell{sd, pd}] = append(own[cell{sd, pd}], w.rate/base)
				}
				if best.rate > 0 {
					vsRef[cell{sd, pd}] = append(vsRef[cell{sd, pd}], w.rate/best.rate)
					cpuRatio[cell{sd, pd}] = append(cpuRatio[cell{sd, pd}], float64(w.cpu.self)/float64(best.cpu))
				}
				refCols, refCPU := "- | -", "-"
				if best.rate > 0 {
					refCols = fmt.Sprintf("%.0f/s (N=%d) | %.2f", best.rate, best.c, w.rate/best.rate)
					refCPU = best.cpu.Round(time.Microsecond).String()
				}
				rawCols := "- | -"
				if raw.rate > 0 {
					vsRaw[cell{sd, pd}] = append(vsRaw[cell{sd, pd}], w.rate/raw.rate)
					rawCols = fmt.Sprintf("%.0f/s (N=%d) | %.2f", raw.rate, raw.c, w.rate/raw.rate)
				}
				fmt.Printf("| %v | %v | %.0f/s | %s | %s | %s | %v | %s | %.2f | %d, %d, %d |\n", sd, pd, w.rate, share, refCols,
					rawCols, w.cpu.self.Round(time.Microsecond), refCPU,
					(w.cpu.self+w.cpu.goaws+w.cpu.postgres).Seconds()*w.rate, w.end.Pollers, w.end.Concurrency, w.end.Capacity)
				if lf.detail {
					fmt.Printf("|   | | the worker's run: %.1f messages per receive (empty ones included), %.1f per batch; a receive that returned messages took %v, a message waited %v for a handler, and its handler (its turn in the batch's transaction) took %v | | | | | | | | | |\n",
						w.perRecv, w.perCall, w.receive.Round(10*time.Microsecond), w.held.Round(10*time.Microsecond), w.handler.Round(10*time.Microsecond))
				}
			}
		}
	}
	if lf.rounds > 1 {
		fmt.Printf("\n%d rounds, medians (range) of the ratios each round measured:\n\n| SQS RTT | PG RTT | worker / its 0+0 rate | worker / reference | worker / raw SQS drain | CPU/msg worker / reference |\n|---:|---:|---:|---:|---:|---:|\n", lf.rounds)
		for _, sd := range sqsDelays {
			for _, pd := range pgDelays {
				c := cell{sd, pd}
				fmt.Printf("| %v | %v | %s | %s | %s | %s |\n", sd, pd, medianRange(own[c]), medianRange(vsRef[c]), medianRange(vsRaw[c]), medianRange(cpuRatio[c]))
			}
		}
	}
	wst.print(b.name + ", latency table, the worker's runs")
	fmt.Printf("\n(CPU per message counts the bench process, which runs the proxies too when a cell adds latency; machine CPU is the worker run's bench process, SQS server and PostgreSQL, in cores.)\n")
	return nil
}

// proxies are the delaying proxies in front of SQS and PostgreSQL, with a client, a pool and an
// inbox that go through them.
type proxies struct {
	sqs, pg   *latency.Proxy
	sqsClient *sqs.Client
	pool      *pgxpool.Pool
	ib        *inbox.Inbox
}

// startProxies starts the proxies; the SQS client through its proxy sends its requests with hc
// (nil: the SDK's own HTTP client).
func (b *bench) startProxies(ctx context.Context, hc sqs.HTTPClient) (_ *proxies, err error) {
	px := &proxies{}
	defer func() {
		if err != nil {
			px.close()
		}
	}()
	u, err := url.Parse(b.srv.Endpoint)
	if err != nil {
		return nil, err
	}
	if px.sqs, err = latency.Start(u.Host); err != nil {
		return nil, err
	}
	if px.sqsClient, err = b.srv.NewClient(ctx, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String("http://" + px.sqs.Addr())
		if hc != nil {
			o.HTTPClient = hc
		}
	}); err != nil {
		return nil, err
	}
	pcfg := b.pool.Config()
	if px.pg, err = latency.Start(net.JoinHostPort(pcfg.ConnConfig.Host, strconv.Itoa(int(pcfg.ConnConfig.Port)))); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(px.pg.Addr())
	pc := pcfg.Copy()
	pc.ConnConfig.Host = host
	p, _ := strconv.Atoi(port)
	pc.ConnConfig.Port = uint16(p)
	if px.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	px.ib, err = inbox.New(px.pool, &inbox.Config{Schema: schema})
	return px, err
}

func (px *proxies) close() {
	if px.pool != nil {
		px.pool.Close()
	}
	if px.pg != nil {
		px.pg.Close()
	}
	if px.sqs != nil {
		px.sqs.Close()
	}
}

// medianRange formats the median of v and its range, or "-" for none.
func medianRange(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s[len(s)/2], s[0], s[len(s)-1])
}

type refRun struct {
	rate float64
	c    int
	cpu  time.Duration // the bench process's CPU per message
}

// reference is the frozen reference: copies loops of ReceiveMessage (10, long poll 1 s), one
// transaction with a savepoint, the inbox's claim and the effect's insert per message (one
// statement at a time, as a hand-written consumer would), COMMIT, and one DeleteMessageBatch. It
// is not tuned: only its parallelism is chosen, per cell, by the table. A non-nil rec records
// each message's commit.
func (b *bench) reference(ctx context.Context, client worker.SQSClient, pool *pgxpool.Pool, qurl string, n, copies int, rec *latRec) (refRun, error) {
	handler := fmt.Sprintf("reference-%d", b.nextRun())
	claim := `INSERT INTO ` + schema + `.processed_messages (handler, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	var done atomic.Int64
	var finished atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	cpu0 := b.cpu.read()
	start := time.Now()
	for range copies {
		wg.Go(func() {
			for done.Load() < int64(n) && firstErr.Load() == nil {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &qurl, MaxNumberOfMessages: 10,
					WaitTimeSeconds: 1}, worker.PlainRequestBodies)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				if err := func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback(ctx) }()
					for _, m := range out.Messages {
						key, err := inbox.KeyFromJSONField([]byte(aws.ToString(m.Body)), "id")
						if err != nil {
							return err
						}
						if _, err := tx.Exec(ctx, "SAVEPOINT m"); err != nil {
							return err
						}
						tag, err := tx.Exec(ctx, claim, handler, key)
						if err != nil {
							return err
						}
						if tag.RowsAffected() == 1 {
							if err := b.effect(ctx, tx, key); err != nil {
								return err
							}
						}
						if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT m"); err != nil {
							return err
						}
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					rec.committed(out.Messages)
					return nil
				}(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &qurl, Entries: entries},
					worker.PlainRequestBodies); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if done.Add(int64(len(out.Messages))) >= int64(n) {
					finished.CompareAndSwap(0, int64(time.Since(start)))
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return refRun{}, fmt.Errorf("reference: %w", err)
	}
	used := b.cpu.read().sub(cpu0)
	return refRun{rate: float64(n) / time.Duration(finished.Load()).Seconds(), c: copies,
		cpu: used.self / time.Duration(n)}, nil
}

// share starts k workers at their defaults together on one queue of n messages, as k replicas of
// one service, and prints the share each processed: a worker that hoards more than it can run
// in time leaves the others idle.
func (b *bench) share(ctx context.Context, n, k int) error {
	url, err := b.queue(ctx, n)
	if err != nil {
		return err
	}
	handler := fmt.Sprintf("share-%d", b.nextRun())
	ws := make([]*worker.Worker, k)
	cs := make([]*counts, k)
	for i := range ws {
		h, err := inboxhandler.New(b.ib, handler, nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			key, _, _ := inbox.EventKey(ctx)
			return b.effect(ctx, tx, key)
		})
		if err != nil {
			return err
		}
		cs[i] = &counts{prog: &tracker{}}
		if ws[i], err = worker.New(b.sqs, &worker.Config{QueueURL: url, WaitTime: time.Second, Handler: h, Metrics: cs[i], Logger: b.log}); err != nil {
			return err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { _ = w.Start(ctx) })
	}
	wg.Wait()
	deadline := start.Add(runTimeout)
	total := func() (t int64) {
		for _, c := range cs {
			t += c.deleted.Load()
		}
		return t
	}
	for total() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	el := time.Since(start)
	for _, w := range ws {
		if err := w.Stop(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("\n%d workers at their defaults on one queue of %d messages, started together: %.0f msgs/s in all; shares:", k, n, float64(total())/el.Seconds())
	for i, c := range cs {
		fmt.Printf(" w%d %.1f%%", i, 100*float64(c.deleted.Load())/float64(n))
	}
	fmt.Println()
	return nil
}

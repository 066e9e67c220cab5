package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/reqcount"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// The load table: what a message costs in SQS requests (SQS bills each one) and how long it takes
// from its send to its commit, at an offered load below the worker's capacity. Per cell of the
// added latencies, the worker at its defaults (its WaitTime too: 20 s) first drains a backlog of
// -n messages, which gives its capacity and the requests per message at a steady backlog; then
// an open-loop producer sends at each -load share of that capacity for -load-secs, each message
// carrying its send time, and the worker receives them as they come. A message's latency is its
// commit (the handler's return, just after the inbox transaction commits) less its send. The
// frozen reference (latency.go) then takes the same offered load. The requests are counted by a
// counting HTTP client under the SQS client (harness/reqcount): every attempt, by action.
type loadFlags struct {
	load, sqs, pg string
	secs          float64
	refc          int
	idle          time.Duration
}

var ldf loadFlags

func (f *loadFlags) register() {
	flag.StringVar(&f.load, "load", "", "load table: offered loads in percent of the worker's capacity, comma-separated (empty skips the table), e.g. 10,25,50,90")
	flag.StringVar(&f.sqs, "load-sqs", "0,20", "load table: round-trip times added to SQS, in ms")
	flag.StringVar(&f.pg, "load-pg", "0,1", "load table: round-trip times added to PostgreSQL, in ms")
	flag.Float64Var(&f.secs, "load-secs", 10, "load table: seconds the producer sends at each load")
	flag.IntVar(&f.refc, "load-refc", 16, "load table: parallelism of the frozen reference at the same offered load (0: no reference)")
	flag.DurationVar(&f.idle, "idle", 0, "run one worker at its defaults on an empty queue this long and print the SQS requests it made, per minute and per hour (0 skips it)")
}

// latRec records the send-to-commit latencies of a run's messages.
type latRec struct {
	mu  sync.Mutex
	lat []time.Duration
}

var sentField = []byte(`"sent":`)

// record notes that the message with body was committed at.
func (r *latRec) record(body []byte, at time.Time) {
	i := bytes.Index(body, sentField)
	if i < 0 {
		return
	}
	rest := body[i+len(sentField):]
	j := bytes.IndexAny(rest, ",}")
	if j < 0 {
		return
	}
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.lat = append(r.lat, at.Sub(time.Unix(0, ns)))
	r.mu.Unlock()
}

// committed records the reference's messages, committed now; on a nil r it does nothing.
func (r *latRec) committed(msgs []types.Message) {
	if r == nil {
		return
	}
	now := time.Now()
	for _, m := range msgs {
		r.record([]byte(aws.ToString(m.Body)), now)
	}
}

// wrap records the commits of h's messages; h must be the bench's *inboxhandler.Handler (other
// handlers are returned as they are, unrecorded).
func (r *latRec) wrap(h worker.Handler) worker.Handler {
	ih, ok := h.(*inboxhandler.Handler)
	if !ok {
		return h
	}
	return &recHandler{Handler: ih, rec: r}
}

// percentiles returns the p50, p99 and p99.9 of the latencies recorded.
func (r *latRec) percentiles() (p50, p99, p999 time.Duration, n int) {
	r.mu.Lock()
	s := slices.Clone(r.lat)
	r.mu.Unlock()
	if len(s) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return at(0.50), at(0.99), at(0.999), len(s)
}

// recHandler is the inbox handler, noting the commit of each message it returns success for.
type recHandler struct {
	*inboxhandler.Handler
	rec *latRec
}

func (h *recHandler) Handle(ctx context.Context, m *worker.Message) error {
	err := h.Handler.Handle(ctx, m)
	if err == nil {
		h.rec.record(m.Body, time.Now())
	}
	return err
}

func (h *recHandler) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	errs := h.Handler.HandleBatch(ctx, b)
	now := time.Now()
	for i := range b.Len() {
		if errs == nil || errs[i] == nil {
			h.rec.record(b.Message(i).Body, now)
		}
	}
	return errs
}

// produce sends total messages to url at rate a second, open loop (the messages due every
// millisecond or so are sent in batches of up to 10, by up to 16 calls at once, whatever the
// consumer does), each with its send time in the body; it returns when they are all sent.
func (b *bench) produce(ctx context.Context, url string, total int, rate float64) error {
	r := b.nextRun()
	type batch struct{ from, n int }
	work := make(chan batch, 1024)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			entries := make([]types.SendMessageBatchRequestEntry, 0, 10)
			for bt := range work {
				entries = entries[:0]
				sent := time.Now().UnixNano()
				for i := bt.from; i < bt.from+bt.n; i++ {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i - bt.from)),
						MessageBody: aws.String(fmt.Sprintf(`{"id":"l%d-%d","order":"o-%d","amount":4200,"sent":%d}`, r, i, i, sent))})
				}
				out, err := b.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries}, worker.PlainRequestBodies)
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("SendMessageBatch: %d failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	start := time.Now()
	next := 0
	for next < total && firstErr.Load() == nil {
		due := min(int(time.Since(start).Seconds()*rate), total)
		for next < due {
			k := min(10, due-next)
			work <- batch{next, k}
			next += k
		}
		time.Sleep(time.Millisecond)
	}
	close(work)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	return nil
}

// perK formats the requests of c per 1,000 of n messages: all, then receives (empty), deletes,
// visibility changes.
func perK(c reqcount.Counts, n int) string {
	k := 1000 / float64(max(n, 1))
	vis := c.By["ChangeMessageVisibility"] + c.By["ChangeMessageVisibilityBatch"]
	del := c.By["DeleteMessage"] + c.By["DeleteMessageBatch"]
	other := c.Total() - c.By["ReceiveMessage"] - vis - del
	return fmt.Sprintf("%.0f | %.0f (%.0f) | %.0f | %.0f | %.0f", float64(c.Total())*k, float64(c.By["ReceiveMessage"])*k,
		float64(c.EmptyReceives)*k, float64(del)*k, float64(vis)*k, float64(other)*k)
}

// loadTable prints, per cell of the added latencies, the worker's capacity and requests per
// message at a backlog, then at each offered load its requests per message and send-to-commit
// percentiles, beside the frozen reference's percentiles at the same load.
func (b *bench) loadTable(ctx context.Context, n int) error {
	loads, err := ints(ldf.load)
	if err != nil {
		return err
	}
	sqsDelays, pgDelays, err := delays(ldf.sqs, ldf.pg)
	if err != nil {
		return err
	}
	rc := reqcount.NewTransport(256)
	direct, err := b.srv.NewClient(ctx, func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		return err
	}
	px, err := b.startProxies(ctx, rc)
	if err != nil {
		return err
	}
	defer px.close()
	fmt.Printf("\nload: the worker at its defaults (WaitTime 20 s) drains a backlog of %d messages (its capacity), then takes an open-loop producer's messages at each load for %.0f s; the frozen reference (N=%d) takes the same offered load. Latency: send to commit. Requests: every SQS request the consumer made (reqcount), per 1,000 messages: all | receives (empty ones) | deletes | visibility changes | other\n\n",
		n, ldf.secs, ldf.refc)
	fmt.Printf("| SQS RTT | PG RTT | load | offered | requests / 1,000 msgs: all | receives (empty) | deletes | visibility | other | worker p50 | p99 | p99.9 | reference p50 | p99 | p99.9 | worker's pollers, concurrency at the end |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sd := range sqsDelays {
		px.sqs.SetRTT(sd, 0)
		client := worker.SQSClient(direct)
		if sd > 0 {
			client = px.sqsClient
		}
		for _, pd := range pgDelays {
			px.pg.SetRTT(pd, 0)
			o := workerOpts{ib: b.ib, wait: worker.DefaultWaitTime}
			pool := b.pool
			if pd > 0 {
				o.ib, pool = px.ib, px.pool
			}
			url, err := b.queue(ctx, n)
			if err != nil {
				return err
			}
			c0 := rc.Snapshot()
			w, err := b.runWorkerOpts(ctx, client, url, n, o)
			if err != nil {
				return err
			}
			if w.prog.done < n {
				return fmt.Errorf("the worker drained only %d of %d messages at SQS %v, PostgreSQL %v", w.prog.done, n, sd, pd)
			}
			fmt.Printf("| %v | %v | backlog | %.0f/s (capacity) | %s | - | - | - | - | - | - | %d, %d |\n", sd, pd, w.rate,
				perK(rc.Snapshot().Sub(c0), n), w.end.Pollers, w.end.Concurrency)
			for _, pct := range loads {
				rate := w.rate * float64(pct) / 100
				total := max(int(rate*ldf.secs), 10)
				url, err := b.queue(ctx, 0)
				if err != nil {
					return err
				}
				var wrec, rrec latRec
				perr := make(chan error, 1)
				o.rec = &wrec
				o.started = func() { go func() { perr <- b.produce(ctx, url, total, rate) }() }
				c0 := rc.Snapshot()
				lw, err := b.runWorkerOpts(ctx, client, url, total, o)
				if err != nil {
					return err
				}
				if err := <-perr; err != nil {
					return err
				}
				if lw.prog.done < total {
					return fmt.Errorf("the worker at %d%% load handled only %d of %d messages", pct, lw.prog.done, total)
				}
				cnt := rc.Snapshot().Sub(c0)
				ref := "- | - | -"
				if ldf.refc > 0 {
					url, err := b.queue(ctx, 0)
					if err != nil {
						return err
					}
					go func() { perr <- b.produce(ctx, url, total, rate) }()
					if _, err := b.reference(ctx, client, pool, url, total, ldf.refc, &rrec); err != nil {
						return err
					}
					if err := <-perr; err != nil {
						return err
					}
					r50, r99, r999, _ := rrec.percentiles()
					ref = fmt.Sprintf("%v | %v | %v", ms(r50), ms(r99), ms(r999))
				}
				p50, p99, p999, _ := wrec.percentiles()
				fmt.Printf("| %v | %v | %d%% | %.0f/s | %s | %v | %v | %v | %s | %d, %d |\n", sd, pd, pct, rate, perK(cnt, total),
					ms(p50), ms(p99), ms(p999), ref, lw.end.Pollers, lw.end.Concurrency)
			}
		}
	}
	return nil
}

// ms rounds d for the table.
func ms(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

// idleRequests runs one worker at its defaults on an empty queue and prints the SQS requests it
// made in its first long poll (WaitTime, 20 s, and a second), then in the d after it, per minute
// and extrapolated to an hour.
func (b *bench) idleRequests(ctx context.Context, d time.Duration) error {
	rc := reqcount.NewTransport(256)
	client, err := b.srv.NewClient(ctx, func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		return err
	}
	url, err := b.queue(ctx, 0)
	if err != nil {
		return err
	}
	h, err := inboxhandler.New(b.ib, fmt.Sprintf("idle-%d", b.nextRun()), nil, func(context.Context, pgx.Tx, *worker.Message) error { return nil })
	if err != nil {
		return err
	}
	w, err := worker.New(client, &worker.Config{QueueURL: url, Handler: h, Logger: b.log})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	c0 := rc.Snapshot()
	time.Sleep(worker.DefaultWaitTime + time.Second)
	c1 := rc.Snapshot()
	first := c1.Sub(c0)
	start := time.Now()
	time.Sleep(d)
	c := rc.Snapshot().Sub(c1)
	el := time.Since(start)
	st := w.State()
	if err := w.Stop(ctx); err != nil {
		return err
	}
	perMin := float64(c.Total()) / el.Minutes()
	fmt.Printf("\nidle: one worker at its defaults (WaitTime 20 s) on an empty %s queue: %d requests in its first %v (%v), then %d in %v (%v): %.1f a minute, %.0f an hour per worker (extrapolated); %d pollers at the end\n",
		b.name, first.Total(), worker.DefaultWaitTime+time.Second, first.By, c.Total(), el.Round(time.Second), c.By, perMin, perMin*60, st.Pollers)
	return nil
}

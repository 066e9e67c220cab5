package reliability

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// workerSet is a set of in-process workers; stopAll stops those still running.
type workerSet struct{ ws []*Worker }

func (s *workerSet) start(ctx context.Context, c WorkerConfig) (*Worker, error) {
	w, err := StartWorker(ctx, c)
	if err == nil {
		s.ws = append(s.ws, w)
	}
	return w, err
}

// unknownCommits returns how many deliveries the workers saw end with a COMMIT of unknown outcome.
func (s *workerSet) unknownCommits() int {
	n := 0
	for _, w := range s.ws {
		n += w.Audit.UnknownCommits()
	}
	return n
}

func (s *workerSet) stopAll(ctx context.Context) []string {
	var bad []string
	for _, w := range s.ws {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := w.Stop(sctx); err != nil {
			bad = append(bad, "stop: "+err.Error())
		}
		cancel()
	}
	s.ws = nil
	return bad
}

func runCommitCut(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "commit-cut", RunOptions{Size: s, Visibility: 3 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	px, purl, err := r.pgProxy()
	if err != nil {
		return nil, err
	}
	defer px.Close()
	// First every COMMIT is cut, so that three attempts in a row have unknown outcomes and the
	// worker must not delete the messages until a claim of their own settles them (the worker
	// keeps them through the pause and runs them again, or hands them back); then every seventh,
	// which the inbox settles in process by claiming again.
	px.CutEvery.Store(1)
	prod := &Producer{Run: r, Retries: 2}
	var set workerSet
	defer set.stopAll(ctx)
	for i := range s.Workers {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.DatabaseURL, c.JitterDelay = purl, 5*time.Millisecond
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
	}
	sent := sendAsync(ctx, prod, GoodEvents("cut", s.Messages), s.Spread)
	deadline := time.Now().Add(s.Wait())
	for set.unknownCommits() == 0 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reliability: no worker saw a commit with an unknown outcome within %v of every COMMIT cut", s.Wait())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	allCut := px.Commits()
	px.CutEvery.Store(7)
	if err := <-sent; err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, s.Messages, s.Wait()); err != nil {
		return nil, err
	}
	px.CutEvery.Store(0)
	unknown := set.unknownCommits()
	checks := set.stopAll(ctx)
	if px.CutBefore.Load() == 0 || px.CutAfter.Load() == 0 {
		checks = append(checks, fmt.Sprintf("the proxy cut %d COMMITs before and %d after the server got them; both kinds must happen",
			px.CutBefore.Load(), px.CutAfter.Load()))
	}
	if unknown == 0 {
		checks = append(checks, "no worker saw a commit with an unknown outcome")
	}
	notes := []string{fmt.Sprintf("%d COMMITs through the proxy (the first %d all cut, then every seventh); cut %d before the server got them and %d after; the workers saw %d unknown outcomes",
		px.Commits(), allCut, px.CutBefore.Load(), px.CutAfter.Load(), unknown)}
	// The unknown outcomes show that the fault hit work in flight: their messages need not come
	// back, since the worker keeps what it holds through the pause the lost connections begin.
	return r.finish(ctx, prod, s.Workers, checks, notes)
}

func runSQSOutage(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "sqs-outage-throttle", RunOptions{Size: s, Visibility: 3 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	wpx, err := NewSQSProxy(e.SQS.Endpoint)
	if err != nil {
		return nil, err
	}
	defer wpx.Close()
	ppx, err := NewSQSProxy(e.SQS.Endpoint)
	if err != nil {
		return nil, err
	}
	defer ppx.Close()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	pc := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(ppx.Endpoint())
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
		worker.PlainRequestBodies(o)
	})
	prod := &Producer{Run: r, Client: pc, Retries: 6, Timeout: 5 * time.Second}
	var set workerSet
	defer set.stopAll(ctx)
	for i := range s.Workers {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.SQSEndpoint, c.JitterDelay = wpx.Endpoint(), 5*time.Millisecond
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
	}
	sent := sendAsync(ctx, prod, GoodEvents("sqs", s.Messages), s.Spread)
	if err := r.WaitEffects(ctx, s.Messages/5, s.Wait()); err != nil {
		return nil, err
	}
	var checks, notes []string
	both := func(f func(p *SQSProxy)) { f(wpx); f(ppx) }
	// Throttling and 5xx.
	t0 := time.Now()
	both(func(p *SQSProxy) { p.SetFaults(0.3, 0.2) })
	err = sleep(ctx, 4*time.Second)
	both(func(p *SQSProxy) { p.SetFaults(0, 0) })
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	// The server unreachable.
	both(func(p *SQSProxy) { p.SetDown(true) })
	err = sleep(ctx, 5*time.Second)
	both(func(p *SQSProxy) { p.SetDown(false) })
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	wc := wpx.Calls()
	notes = append(notes,
		fmt.Sprintf("throttling 30%% + 503 20%% for 4 s: worker calls %d (peak %d/s)", wc.Total("", t0, t1), wc.MaxPerSecond("", t0, t1)),
		fmt.Sprintf("server unreachable for 5 s: worker calls and connection attempts %d (peak %d/s)", wc.Total("", t1.Add(time.Second), t2), wc.MaxPerSecond("", t1.Add(time.Second), t2)))
	// A spin makes thousands of calls a second; backoff makes a few per poller.
	if peak := wc.MaxPerSecond("", t1.Add(time.Second), t2); peak > 100*s.Workers {
		checks = append(checks, fmt.Sprintf("%d calls in one second while the server was unreachable: a hot loop", peak))
	}
	if err := <-sent; err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, prod.OKKeys(), s.Wait()); err != nil {
		return nil, err
	}
	checks = append(checks, set.stopAll(ctx)...)
	return r.finish(ctx, prod, s.Workers, checks, notes)
}

// failDeletes fails the deletes of chosen keys (a per-entry failure that is not "gone", so the
// worker retries and then gives up).
type failDeletes struct {
	Client
	bad     func(key string) bool
	mu      sync.Mutex
	handles map[string]string
	failed  int
}

func (f *failDeletes) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := f.Client.ReceiveMessage(ctx, in, optFns...)
	if err == nil {
		f.mu.Lock()
		for _, m := range out.Messages {
			f.handles[aws.ToString(m.ReceiptHandle)] = infoOf(m).key
		}
		f.mu.Unlock()
	}
	return out, err
}

func (f *failDeletes) isBad(h string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bad(f.handles[h]) {
		f.failed++
		return true
	}
	return false
}

func (f *failDeletes) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if f.isBad(aws.ToString(in.ReceiptHandle)) {
		return nil, sqsfake.Unavailable
	}
	return f.Client.DeleteMessage(ctx, in, optFns...)
}

func (f *failDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	var pass []types.DeleteMessageBatchRequestEntry
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		if f.isBad(aws.ToString(e.ReceiptHandle)) {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: false})
		} else {
			pass = append(pass, e)
		}
	}
	if len(pass) > 0 {
		in2 := *in
		in2.Entries = pass
		o, err := f.Client.DeleteMessageBatch(ctx, &in2, optFns...)
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, o.Successful...)
		out.Failed = append(out.Failed, o.Failed...)
	}
	return out, nil
}

func runDeleteFails(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "delete-fails-dlq-redrive", RunOptions{Size: s, Visibility: time.Second, MaxReceive: 3})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	evs := GoodEvents("del", s.Messages)
	bad := map[string]bool{}
	for i := 0; i < len(evs); i += 20 {
		bad[evs[i].Key] = true
	}
	var set workerSet
	defer set.stopAll(ctx)
	var fds []*failDeletes
	for i := range s.Workers {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.Wrap = func(next Client) Client {
			fd := &failDeletes{Client: next, bad: func(k string) bool { return bad[k] }, handles: map[string]string{}}
			fds = append(fds, fd)
			return fd
		}
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
	}
	if err := prod.Send(ctx, evs, s.Spread); err != nil {
		return nil, err
	}
	var checks []string
	deadline := time.Now().Add(s.Wait())
	for {
		n, err := r.Count(ctx, r.Queue.DLQURL)
		if err == nil && n >= len(bad) {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("only %d of %d messages whose deletes fail reached the DLQ in 3 minutes", n, len(bad)))
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	checks = append(checks, set.stopAll(ctx)...)
	failed := 0
	for _, fd := range fds {
		failed += fd.failed
	}
	rep, err := r.finish(ctx, prod, s.Workers, checks, []string{fmt.Sprintf("%d deletes failed on purpose for %d keys", failed, len(bad))})
	if err == nil && (rep.ProcessedInDLQ != len(bad) || rep.Redriven != len(bad)) {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d processed messages in the DLQ and %d redriven, want %d", rep.ProcessedInDLQ, rep.Redriven, len(bad)))
	}
	return rep, err
}

// blockHeartbeats makes every visibility extension hang until its call times out (a heartbeat
// that cannot get through); releases (visibility 0) pass.
type blockHeartbeats struct{ Client }

func (b blockHeartbeats) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if in.VisibilityTimeout > 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Client.ChangeMessageVisibility(ctx, in, optFns...)
}

func runVisibilityExpires(ctx context.Context, e *Env, s Size) (*Report, error) {
	const vis = 2 * time.Second
	r, err := e.NewRun(ctx, "visibility-expires", RunOptions{Size: s, Visibility: vis, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	n := min(s.Messages, 40)
	prod := &Producer{Run: r}
	if err := prod.Send(ctx, GoodEvents("vis", n), 0); err != nil {
		return nil, err
	}
	var set workerSet
	defer set.stopAll(ctx)
	a := r.WorkerConfig("slow")
	a.Concurrency, a.MaxConns, a.SlowDelay = n, int32(n+2), vis+2*time.Second
	// One message per transaction: the scenario is about one slow handler whose visibility runs
	// out; a batch of such handlers would hold its claims for the sum of their times, longer than
	// the second consumer's claim waits (docs/how-it-works.md says to batch slow handlers by 1).
	a.HandlerBatch = 1
	// No prefetch: with free slots, this worker would receive its own expired messages again and
	// hold them, and the second consumer would get none.
	a.Prefetch = -1
	a.Wrap = func(next Client) Client { return blockHeartbeats{next} }
	wa, err := set.start(ctx, a)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for wa.W.InFlight() < n/2 && time.Now().Before(deadline) {
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	met := &counters{}
	b := r.WorkerConfig("second")
	b.Concurrency, b.MaxConns, b.Metrics, b.HandlerBatch = n, int32(n+2), met, 1
	if _, err := set.start(ctx, b); err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, n, 2*time.Minute); err != nil {
		return nil, err
	}
	var checks []string
	deadline = time.Now().Add(2 * time.Minute)
	for {
		c, err := r.Count(ctx, r.Queue.URL)
		if err == nil && c == 0 {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("%d messages left after 2 minutes", c))
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	checks = append(checks, set.stopAll(ctx)...)
	if met.get(worker.Duplicates) == 0 {
		checks = append(checks, "the second consumer never ended as a duplicate: the visibility timeout did not expire under a running handler")
	}
	notes := []string{fmt.Sprintf("%d messages held by handlers of %v with heartbeats blocked (visibility %v); the second consumer: %d duplicates, %d processed",
		n, a.SlowDelay, vis, met.get(worker.Duplicates), met.get(worker.Processed))}
	return requireRedelivery(r.finish(ctx, prod, 2, checks, notes))
}

func runPoisonFake(ctx context.Context, e *Env, s Size) (*Report, error) {
	f := sqsfake.New()
	dlq := f.CreateQueue(sqsfake.QueueOptions{Name: "rel-poison-dlq", VisibilityTimeout: 2 * time.Second, Retention: 14 * 24 * time.Hour})
	q := f.CreateQueue(sqsfake.QueueOptions{Name: "rel-poison", VisibilityTimeout: 2 * time.Second, DeadLetterQueue: dlq, MaxReceiveCount: 3})
	r, err := e.NewRun(ctx, "poison-bad-utf8-fake", RunOptions{Size: s, Client: f, Queue: &sqstest.Queue{Name: "rel-poison", URL: q, DLQURL: dlq}})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r}
	n := min(s.Messages, 1000)
	kinds := append([]string{KindBadUTF8Key, KindBadUTF8Key}, PoisonKinds...)
	poison := max(len(kinds), n/10)
	evs := append(GoodEvents("fgood", n), PoisonEvents("fpoison", poison, kinds)...)
	if err := prod.Send(ctx, shuffle(evs), 0); err != nil {
		return nil, err
	}
	var set workerSet
	defer set.stopAll(ctx)
	for i := range 2 {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.Client, c.Backoff = f, 200*time.Millisecond
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
	}
	var checks []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := r.Count(ctx, dlq)
		if err == nil && c >= poison {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("%d of %d poison messages in the DLQ after 2 minutes", c, poison))
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	checks = append(checks, set.stopAll(ctx)...)
	rep, err := r.finish(ctx, prod, 2, checks, nil)
	if err == nil {
		if rep.PoisonInDLQ != rep.PoisonSent {
			rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d poison messages in the DLQ", rep.PoisonInDLQ, rep.PoisonSent))
		}
		if v := f.Violations(); len(v) > 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("requests real SQS would refuse: %q", v))
		}
	}
	return rep, err
}

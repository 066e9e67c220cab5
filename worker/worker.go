package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/semaphore"

	"github.com/sqsinbox/sqsinbox/internal/core/startstop"
)

// Backoff of a poller after failed receives, and of the pause after [Unavailable] results.
const (
	pollBackoffMin  = 100 * time.Millisecond
	pollBackoffMax  = 30 * time.Second
	pauseBackoffMin = 500 * time.Millisecond
	pauseBackoffMax = 30 * time.Second
	// pauseParkedMax bounds the pause while its probes are parked messages (pause.go), which
	// spend no receive: the worker resumes within it of the dependency's return.
	pauseParkedMax = 2 * time.Second
	// shortPollIdle is the pause after an empty receive when long polling is off.
	shortPollIdle = 200 * time.Millisecond
	// maxEarlyEmptyWait bounds a poller's wait after empty long polls in a row that came back
	// early (earlyEmptyWait).
	maxEarlyEmptyWait = time.Second
	// callTimeout bounds each visibility and delete call.
	callTimeout = 15 * time.Second
	// capMargin keeps every visibility request clear of the 12-hour cap (see lease.go).
	capMargin = 5 * time.Second
	// gatherWait is how long a poller holding some free slots waits for more before it receives.
	gatherWait = 5 * time.Millisecond
	// probeQuiet is how long a probe during a pause waits for the messages outstanding to settle
	// before it goes ahead anyway.
	probeQuiet = 5 * time.Second
	// receiveGrace is how long a stop lets a receive in flight finish before abandoning it.
	receiveGrace = 2 * time.Second
)

// Worker receives messages from one SQS queue and runs a handler on each, at most
// Config.Concurrency calls at once (each on one message, or on a batch of up to
// Config.HandlerBatch for a [BatchHandler]). It deletes a message only after its handler
// succeeded.
type Worker struct {
	client SQSClient          // the caller's, under a countingClient
	sdk    SQSClient          // the caller's, as it was given (for its Options)
	opt    func(*sqs.Options) // passed on every SQS call (callOption)
	cfg    Config
	log    *slog.Logger
	e      *engine // what the deliveries share

	life startstop.Base // started, stopping, stopped; the stop and work contexts

	mu    sync.Mutex
	queue *Queue // set under mu once the worker runs

	stopping      atomic.Bool
	receiveFailed episodeLog   // failed-receive lines: one warning per episode
	lastReceive   atomic.Int64 // unix nanoseconds of the last ReceiveMessage that succeeded
	lastGot       atomic.Int64 // unix nanoseconds of the last ReceiveMessage that brought messages
	recvStarted   atomic.Int64 // unix nanoseconds of the start of the pollers' last ReceiveMessage
	startedAt     time.Time

	recvCtx    context.Context // ends at a hard stop, or a grace after the stop: receives in flight are abandoned
	recvCancel context.CancelCauseFunc

	size  *sizer     // the pollers and the capacity, sized to the receive's latency
	ready chan item  // received deliveries for the runners; closed once the pollers have stopped
	fair  *fairQueue // instead of ready on a standard queue with Config.MaxPerGroup; set at start
	// gatherTurn is held by the one poller that takes slots for its next receive (see acquire).
	gatherTurn chan struct{}

	pendingMu sync.Mutex
	pending   map[*group]struct{} // FIFO groups with deliveries not yet started

	groupless grouplessWatch // with MaxPerGroup: warns once when the messages carry no group id

	pollers sync.WaitGroup
	runners sync.WaitGroup
}

// New returns a worker that reads with client, as cfg says. It does no I/O; [Worker.Start] does.
// Pass an *sqs.Client built from the standard AWS configuration (which honours
// AWS_ENDPOINT_URL_SQS), so one binary talks to AWS, LocalStack or GoAws.
func New(client SQSClient, cfg *Config) (*Worker, error) {
	if client == nil {
		return nil, errors.New("worker: client is nil")
	}
	if cfg == nil {
		return nil, errors.New("worker: Config is nil (Config.Handler and the queue are required)")
	}
	c := *cfg
	autoPollers, autoPrefetch, autoConcurrency := c.Pollers == 0, c.Prefetch == 0, c.Concurrency == 0
	c.setDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if t := clientHTTPTimeout(client); t > 0 && c.WaitTime > 0 && t <= c.WaitTime {
		return nil, fmt.Errorf("worker: Config.WaitTime is %v but the SQS client's HTTP timeout is %v: "+
			"a long poll would time out; raise the HTTP timeout or lower Config.WaitTime", c.WaitTime, t)
	}
	w := &Worker{
		client:        countingClient{SQSClient: client, m: c.Metrics},
		sdk:           client,
		opt:           callOption(client),
		cfg:           c,
		log:           c.Logger,
		life:          startstop.Base{Cause: ErrStopping, Name: "worker"},
		receiveFailed: episodeLog{quiet: time.Minute},
	}
	w.size = newSizer(&w.cfg, crew{
		stopping: w.life.Stopping,
		poller:   func(id int) { w.pollers.Add(1); go w.poll(id) },
		runner:   func(id int) { w.runners.Add(1); go w.runner(id) },
	}, autoPollers, autoPrefetch, autoConcurrency)
	w.ready = make(chan item, w.size.maxCap)
	w.gatherTurn = make(chan struct{}, 1)
	w.e = &engine{cfg: &w.cfg, metrics: c.Metrics, log: c.Logger, now: time.Now,
		leaseLost: episodeLog{quiet: time.Minute}, slots: semaphore.NewWeighted(int64(w.size.maxCap))}
	w.size.holdReserve(w.e)
	return w, nil
}

// Queue returns what the worker learned about its queue at start, or nil before
// [Worker.Start] has succeeded.
func (w *Worker) Queue() *Queue {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queue
}

// InFlight returns the number of handlers running now.
func (w *Worker) InFlight() int { return int(w.e.inFlight.Load()) }

// Start reads the queue's attributes, runs the start-up checks and starts the pollers. It
// returns once the worker is running, or with the reason it refused to start:
//   - the queue's visibility timeout (or Config.VisibilityTimeout) is 0;
//   - the handler's [QueueChecker] failed (for the inbox: its retention is shorter than the
//     queue's MessageRetentionPeriod, or its database is not ready).
//
// A queue without a redrive policy only logs a warning: failing messages then retry until the
// retention period ends. ctx bounds the start-up calls and carries values to the handlers; it does
// not stop the worker when it ends after Start returned ([Worker.Stop] does).
func (w *Worker) Start(ctx context.Context) error {
	if err := w.life.BeginStart(); err != nil {
		return err
	}
	err := w.start(ctx)
	if err != nil {
		w.life.EndStart(ctx, false) // a failed Start may be tried again
	}
	return err
}

func (w *Worker) start(ctx context.Context) error {
	base := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeoutCause(ctx, w.cfg.StartTimeout, errStartTimeout)
	defer cancel()
	q, vis, log, err := w.prepare(sctx)
	if err != nil {
		if errors.Is(context.Cause(sctx), errStartTimeout) {
			return fmt.Errorf("worker: start-up did not finish within %v (Config.StartTimeout; SQS endpoint %s): %w",
				w.cfg.StartTimeout, w.endpoint(), err)
		}
		return err
	}
	// Everything the pollers, Stop and State read is set before the queue is published under
	// the lock, which is what they check first.
	w.startedAt = time.Now()
	w.log, w.e.log, w.e.vis, w.e.queue, w.e.maxRecv = log, log, vis, q.Name, q.MaxReceiveCount
	w.life.EndStart(ctx, true)
	w.recvCtx, w.recvCancel = context.WithCancelCause(base)
	w.e.work = w.life.WorkContext()
	w.e.sw = &sqsWriter{client: w.client, opt: w.opt, url: q.URL, fifo: q.FIFO, metrics: w.e.metrics, log: log, base: base}
	w.e.del = newDeleter(w.e.sw, w.cfg.DeleteInterval, w.size.maxCap)
	if w.cfg.MaxPerGroup > 0 && !q.FIFO {
		w.fair = newFairQueue(w.cfg.MaxPerGroup, w.cfg.MaxHold)
		w.e.spare = semaphore.NewWeighted(int64(max(w.cfg.Prefetch, w.cfg.BatchSize)))
		w.e.fairHold = true
		w.pollers.Add(2)
		go func() {
			defer w.pollers.Done()
			w.probeFair()
		}()
		go func() {
			defer w.pollers.Done()
			w.holdFair()
		}()
		if gm, ok := w.e.metrics.(GroupMetrics); ok {
			w.pollers.Add(1)
			go func() {
				defer w.pollers.Done()
				w.reportGroups(gm)
			}()
		}
	}
	w.e.parkGroups = q.FIFO && w.fair == nil
	if !q.FIFO && w.fair == nil {
		w.e.parked.ready = w.ready
		w.pollers.Add(1)
		go func() {
			defer w.pollers.Done()
			w.probeParked()
		}()
	}
	w.mu.Lock()
	w.queue = q
	w.mu.Unlock()
	w.size.startRunners(w.cfg.Concurrency)
	w.size.start(w.cfg.Pollers)
	w.pollers.Add(1)
	go func() {
		defer w.pollers.Done()
		w.size.run(w.life.StopContext(), w.e)
	}()
	attrs := []any{"concurrency", w.cfg.Concurrency, "handler_batch", w.cfg.HandlerBatch, "prefetch", max(w.cfg.Prefetch, 0),
		"max_per_group", w.cfg.MaxPerGroup, "max_concurrency", w.size.maxR, "pollers", w.cfg.Pollers, "max_pollers", w.size.maxP, "fifo", q.FIFO,
		"visibility_timeout", vis, "handler_timeout", w.cfg.HandlerTimeout, "max_hold", w.cfg.MaxHold, "shutdown_timeout", w.cfg.ShutdownTimeout,
		"redelivery_horizon", q.RedeliveryHorizon(), "max_receive_count", q.MaxReceiveCount}
	if lv, ok := w.cfg.Handler.(slog.LogValuer); ok {
		attrs = append(attrs, "handler", lv)
	}
	w.log.Info("worker: started", attrs...)
	return nil
}

// errStartTimeout is the cause of Start's context when Config.StartTimeout ends it.
var errStartTimeout = errors.New("worker: start timeout")

// prepare reads the queue and runs the start-up checks.
func (w *Worker) prepare(ctx context.Context) (*Queue, time.Duration, *slog.Logger, error) {
	q, err := loadQueue(ctx, w.client, w.cfg.QueueURL, w.cfg.QueueName, w.opt)
	if err != nil {
		return nil, 0, nil, err
	}
	log := w.cfg.Logger.With("queue", q.Name)
	if q.DeadLetterTargetARN == "" {
		log.Warn("worker: queue has no redrive policy: a message that keeps failing is retried until its retention period ends; add a dead-letter queue")
	} else if err := q.loadDeadLetter(ctx, w.client, w.opt); err != nil {
		// Fail closed: without the DLQ's retention the inbox could be checked against too short
		// a horizon and forget events SQS can still redeliver.
		if !w.cfg.IgnoreDeadLetterRetention {
			return nil, 0, nil, err
		}
		log.Warn("worker: could not read the dead-letter queue's retention; checking against the queue's own (Config.IgnoreDeadLetterRetention)", "error", err)
	}
	vis := w.cfg.VisibilityTimeout
	if vis == 0 {
		vis = q.VisibilityTimeout
	}
	if vis < time.Second {
		return nil, 0, nil, fmt.Errorf("worker: queue %s has a visibility timeout of %v, so every message would be delivered again at once; "+
			"set Config.VisibilityTimeout or the queue's VisibilityTimeout", q.Name, vis)
	}
	if w.cfg.HandlerTimeout > vis {
		log.Debug("worker: the handler timeout is longer than the visibility timeout; heartbeats keep long handlers' messages invisible",
			"handler_timeout", w.cfg.HandlerTimeout, "visibility_timeout", vis)
	}
	if qc, ok := w.cfg.Handler.(QueueChecker); ok {
		if err := qc.CheckQueue(ctx, q); err != nil {
			return nil, 0, nil, fmt.Errorf("worker: start-up check of queue %s: %w", q.Name, err)
		}
	}
	if cc, ok := w.cfg.Handler.(CapacityChecker); ok {
		if err := cc.CheckCapacity(w.cfg.Concurrency); err != nil {
			log.Warn("worker: the handler's resources are short of the concurrency; it runs, but slower", "concurrency", w.cfg.Concurrency, "warning", err)
		}
	}
	return q, vis, log, nil
}

// endpoint names the SQS endpoint the client talks to, for errors: its configured base
// endpoint, else the queue URL's.
func (w *Worker) endpoint() string {
	if oc, ok := w.sdk.(interface{ Options() sqs.Options }); ok {
		if ep := aws.ToString(oc.Options().BaseEndpoint); ep != "" {
			return ep
		}
	}
	if w.cfg.QueueURL != "" {
		if u, err := url.Parse(w.cfg.QueueURL); err == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host
		}
	}
	return "(the SDK's default for the region)"
}

// HardStopTimeout is how long [Worker.Run] waits, after ShutdownTimeout has passed and the
// running handlers were cancelled, for them to return and for the worker to release and delete
// what it holds. ShutdownTimeout (20 s by default) plus it fits inside ECS's default stopTimeout
// of 30 s.
const HardStopTimeout = 5 * time.Second

// Run starts the worker, runs it until ctx ends, and then stops it as [Worker.Stop] does, within
// Config.ShutdownTimeout plus [HardStopTimeout]. It returns Start's error if the worker did not
// start, the error of a stop that did not finish in that budget, or nil. ctx's values reach the
// handlers; its end is the signal to stop, as with http.Server's Shutdown on SIGTERM:
//
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err := w.Run(ctx)
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.ShutdownTimeout+HardStopTimeout)
	defer cancel()
	return w.Stop(stopCtx)
}

// Stop stops receiving, releases received messages that have not started (visibility 0: the
// prefetched ones, and the rest of a FIFO group behind a running message), lets in-flight
// handlers (and batches) finish, flushes the pending deletes, and returns when nothing of the worker
// runs any more. Handlers still running after Config.ShutdownTimeout, or when ctx ends, are
// cancelled with [ErrStopping]. If ctx ends before they return, Stop returns ctx's error and the
// rest of the shutdown goes on in the background.
//
// A receive in progress is given two seconds to finish, and its messages are released:
// abandoning a receive that is returning messages would leave them invisible until their
// visibility timeout ends. A long poll still waiting after that has taken nothing and is
// abandoned.
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, false) }

// StopAndCancel is [Worker.Stop] that cancels the running handlers at once, with [ErrStopping].
// Their messages are made visible again.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, true) }

func (w *Worker) stop(ctx context.Context, cancelNow bool) error {
	first, err := w.life.BeginStop()
	if err != nil {
		return err
	}
	if first {
		w.stopping.Store(true)
		began, running := time.Now(), w.InFlight()
		released0, deleted0 := w.e.sw.released.Load(), w.e.sw.deleted.Load()
		go func() {
			grace := time.AfterFunc(receiveGrace, func() { w.recvCancel(ErrStopping) })
			w.pollers.Wait()
			grace.Stop()
			w.e.parked.close() // nothing is parked, nor handed to the runners, from here on
			close(w.ready)     // no poller sends any more
			if w.fair != nil {
				releaseAll(w.fair.close())
			}
			w.releasePending()
			w.drain()
			w.runners.Wait()
			w.e.del.close()
			cancelled := w.e.work.Err() != nil
			w.recvCancel(ErrStopping)
			w.life.CancelWork()
			w.log.Info("worker: stopped", "handlers_running_at_stop", running, "handlers_cancelled", cancelled,
				"released", w.e.sw.released.Load()-released0, "deleted_during_stop", w.e.sw.deleted.Load()-deleted0,
				"took", time.Since(began).Round(time.Millisecond))
			w.life.Finished()
		}()
	}
	if cancelNow {
		w.life.CancelWork()
	}
	soft := time.NewTimer(w.cfg.ShutdownTimeout)
	defer soft.Stop()
	select {
	case <-w.life.Done():
		return nil
	case <-soft.C:
		w.log.Warn("worker: shutdown timeout reached; cancelling running handlers", "in_flight", w.InFlight())
	case <-ctx.Done():
	}
	w.recvCancel(ErrStopping)
	w.life.CancelWork()
	select {
	case <-w.life.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: stop: %d handlers still running: %w", w.InFlight(), ctx.Err())
	}
}

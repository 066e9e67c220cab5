package worker

import (
	"context"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

var receiveAttributes = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
var allMessageAttributes = []string{"All"}

// The intake: pollers take free slots (a slot is room for one received message: those the
// handlers run and the prefetched ones), receive up to that many messages, lease each one, and
// queue them; Concurrency runners take them from the queue, up to HandlerBatch at a time, and run
// them. The messages of one FIFO group from one receive stay with one runner, in order.

func (w *Worker) poll(id int) {
	defer w.pollers.Done()
	ctx := w.life.StopContext()
	fails := 0
	var prev time.Time // when this poller's last receive was sent
	var early earlyEmpties
	for {
		if ok, wake := w.size.active(id); !ok {
			// Not needed at this receive latency: wait until the sizer wants more pollers.
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		w.e.progress.Store(time.Now().UnixNano())
		if err := w.e.pause.wait(ctx); err != nil {
			return
		}
		n, err := w.slotsForReceive(ctx)
		if err != nil {
			return
		}
		if n == 0 {
			continue
		}
		// The deliveries' 12-hour cap is counted from here (the 12-hour cap: see lease.go).
		requested, sent := w.e.now(), time.Now()
		w.recvStarted.Store(sent.UnixNano())
		out, err := w.client.ReceiveMessage(w.recvCtx, w.receiveInput(n), w.opt)
		if err != nil {
			w.e.slots.Release(int64(n))
			if ctx.Err() != nil {
				return
			}
			fails++
			w.size.recvErrs.Add(1)
			w.e.metrics.Add(ReceiveErrors, 1)
			d := jitter(expo(pollBackoffMin, pollBackoffMax, fails))
			w.log.Log(context.Background(), w.receiveFailed.level(), "worker: receive failed; backing off (more within a minute are logged at debug level)",
				"error", err, "code", errorCode(err), "backoff", d)
			if sleep(ctx, d) != nil {
				return
			}
			continue
		}
		fails = 0
		w.lastReceive.Store(time.Now().UnixNano())
		msgs := out.Messages
		if len(msgs) > 0 {
			w.size.receiveTook(time.Since(sent), len(msgs))
		}
		w.size.received(len(msgs))
		if len(msgs) < n {
			w.e.slots.Release(int64(n - len(msgs)))
		}
		if len(msgs) == 0 {
			if w.cfg.WaitTime < 0 && sleep(ctx, shortPollIdle) != nil {
				return
			}
			if !earlyEmpty(w.cfg.WaitTime, time.Since(sent)) {
				early.n = 0
				continue
			}
			if wait := early.wait(w.cfg.ReceiveLinger, w.lastGot.Load()); wait > 0 && sleep(ctx, wait) != nil {
				return
			}
			continue
		}
		early.n = 0
		w.lastGot.Store(time.Now().UnixNano())
		w.dispatch(msgs, n, requested, false)
		if wait := receiveLinger(w.cfg.ReceiveLinger, len(msgs), n, sent, prev); wait > 0 && sleep(ctx, wait) != nil {
			return
		}
		prev = sent
	}
}

// receiveLinger is how long a poller waits before its next receive after one sent at sent that
// brought got of the asked messages (the receive before it was sent at prev; zero if none): the
// time the rest of a batch takes to arrive at the rate the poller saw over its last cycle, at most
// limit. A full receive does not wait.
func receiveLinger(limit time.Duration, got, asked int, sent, prev time.Time) time.Duration {
	if limit <= 0 || got >= asked || got == 0 {
		return 0
	}
	cycle := time.Since(sent)
	if !prev.IsZero() {
		cycle = sent.Sub(prev)
	}
	return min(limit, cycle*time.Duration(asked-got)/time.Duration(got))
}

// earlyEmpty reports whether an empty long poll of waitTime came back early: after took, less
// than half its wait time. SQS answers a long poll empty only when its wait time has passed; a
// server that answers earlier either lets every waiting poll go when a message arrives, all but
// one of them empty (fauxqs), or does not wait at all (a proxy that cuts long polls short, a
// server that ignores WaitTimeSeconds), where a poller that received again at once would send
// requests as fast as the server answers.
func earlyEmpty(waitTime, took time.Duration) bool {
	return waitTime > 0 && took < waitTime/2
}

// earlyEmpties counts a poller's early empty receives in a row (earlyEmpty).
type earlyEmpties struct {
	n   int   // how many; 0 after a receive that was not an early empty one
	got int64 // Worker.lastGot when the first of them came back
}

// wait is how long the poller waits after one more early empty receive, got being
// Worker.lastGot now. If some poller got a message since the first of the row, the server let
// this poll go because a message arrived (fauxqs does): no wait, as a poll still waiting on SQS
// would have caught the next message, and the row starts again. Else the server answers empty
// without waiting: earlyEmptyWait.
func (e *earlyEmpties) wait(limit time.Duration, got int64) time.Duration {
	if e.n == 0 || got != e.got {
		e.n, e.got = 1, got
		return 0
	}
	d := earlyEmptyWait(limit, e.n)
	e.n++
	return d
}

// earlyEmptyWait is how long a poller waits before its next receive after early empty ones in a
// row (earlyEmpty) with no message received by any poller since the first of them, the first
// included in before (at least 1; the first does not wait): limit (Config.ReceiveLinger) after
// the second, doubled for each one after that, up to maxEarlyEmptyWait. With ReceiveLinger off
// (limit negative) it starts at DefaultReceiveLinger: the guard is not a linger.
func earlyEmptyWait(limit time.Duration, before int) time.Duration {
	if limit <= 0 {
		limit = DefaultReceiveLinger
	}
	ceiling := max(limit, maxEarlyEmptyWait)
	wait := limit
	for range before - 1 {
		if wait >= ceiling {
			break
		}
		wait *= 2
	}
	return min(wait, ceiling)
}

// receiveInput is the ReceiveMessage request for up to n messages.
func (w *Worker) receiveInput(n int) *sqs.ReceiveMessageInput {
	return &sqs.ReceiveMessageInput{
		QueueUrl:                    &w.queue.URL,
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             w.cfg.waitSeconds(),
		VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: receiveAttributes,
		MessageAttributeNames:       allMessageAttributes,
	}
}

// slotsForReceive takes the slots for the next receive: a batch's, or during a pause one, for a
// probe. It returns 0 when the poller should look again first (the pause began, ended, or was
// prolonged while it waited), and ctx's error at a stop.
func (w *Worker) slotsForReceive(ctx context.Context) (int, error) {
	if !w.e.pause.active() {
		n, err := w.acquire(ctx, w.minBatch(), w.cfg.BatchSize)
		if err == nil && w.e.pause.active() {
			// A pause began while this poller waited for slots: probe instead.
			w.e.slots.Release(int64(n))
			return 0, nil
		}
		return n, err
	}
	if w.e.parked.len() > 0 || w.e.parked.waiting.Load() > 0 || w.e.pause.probing() {
		// A parked message is the probe (probeParked, holdGroups): nothing is received in the
		// pause.
		return 0, w.e.pause.waitChange(ctx)
	}
	// A probe: one message, once nothing else is outstanding, so that an outage burns few
	// receive counts. The wait for the others is bounded, so that a handler stuck past it (or a
	// slot held by a message that never settles) cannot stop the probes.
	all := w.size.capacity.Load()
	actx, cancel := context.WithTimeout(ctx, probeQuiet)
	err := w.e.slots.Acquire(actx, all)
	cancel()
	switch {
	case err == nil && !w.e.pause.due():
		// The pause ended, or another probe failed while this one waited and began a new
		// pause: receive as usual, or wait that pause out.
		w.e.slots.Release(all)
		return 0, nil
	case err == nil:
		w.e.slots.Release(all - 1)
	case ctx.Err() != nil:
		return 0, ctx.Err()
	default:
		if err := w.e.slots.Acquire(ctx, 1); err != nil {
			return 0, err
		}
		if !w.e.pause.due() {
			w.e.slots.Release(1)
			return 0, nil
		}
	}
	return 1, nil
}

// minBatch is the number of free slots a poller waits for, at most gatherWait, before it
// receives: a full batch (BatchSize, or the capacity if smaller), or 1 while a runner of a
// fairQueue is idle. Receiving for the few slots free at each moment under load would multiply
// the ReceiveMessage calls per message (SQS bills each); the pollers gather in turn (acquire), so
// one waiting for a batch does not hold slots another waits for.
func (w *Worker) minBatch() int {
	if w.fair != nil && w.fair.idle.Load() > 0 {
		// A runner is free and every message held is over its group's cap (or none is held):
		// what it needs is on the queue, likely another group's (a fair queue delivers those
		// first), so receive now rather than wait to gather a fuller batch.
		return 1
	}
	return max(1, min(w.cfg.BatchSize, int(w.size.capacity.Load())))
}

// acquire takes one slot, waiting for it, then waits up to gatherWait for more until it holds
// need, and then takes as many more as are free now, up to batch.
//
// One poller gathers at a time. When the runners free slots while every slot is taken (a
// backlog), the pollers would otherwise all be waiting for one: each would get one of the freed
// slots, wait gatherWait for more that the others hold, and receive for a few, so that a backlog
// cost a receive for every 6 or 7 messages instead of 10. Taken in turn, the freed slots go to
// one poller until it holds a batch.
func (w *Worker) acquire(ctx context.Context, need, batch int) (int, error) {
	select {
	case w.gatherTurn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-w.gatherTurn }()
	if err := w.e.slots.Acquire(ctx, 1); err != nil {
		return 0, err
	}
	n := 1
	for n < batch && w.e.slots.TryAcquire(1) {
		n++
	}
	if n < need {
		gctx, cancel := context.WithTimeout(ctx, gatherWait)
		for n < need && w.e.slots.Acquire(gctx, 1) == nil {
			n++
		}
		cancel()
	}
	return n, nil
}

// item is one entry of the ready queue: a delivery, or the deliveries of one FIFO group from one
// receive.
type item struct {
	d *delivery
	g *group
}

// dispatch makes deliveries of the received messages, each holding one of the slots taken for
// the receive (of w.e.spare when spare), and queues them for the runners.
func (w *Worker) dispatch(received []types.Message, slots int, requested time.Time, spare bool) {
	w.e.metrics.Add(Received, len(received))
	if len(received) > slots {
		// A server returned more than asked for; those have no slot, and no lease yet.
		extra := make([]*Message, 0, len(received)-slots)
		for i := range received[slots:] {
			extra = append(extra, newMessage(&received[slots+i], requested))
		}
		w.e.sw.release(extra)
		received = received[:slots]
	}
	arrived := time.Now()
	ds := make([]*delivery, len(received))
	for i := range received {
		ds[i] = w.e.receive(&received[i], requested, arrived)
		ds[i].spare = spare
	}
	if w.stopping.Load() {
		releaseAll(ds)
		return
	}
	if w.fair != nil {
		w.noteGroupless(ds)
		w.fair.put(ds)
		return
	}
	if !w.queue.FIFO {
		for _, d := range ds {
			w.ready <- item{d: d}
		}
		return
	}
	for _, g := range groups(ds) {
		grp := &group{rest: g}
		for i, d := range g {
			d.group, d.pos = grp, i
		}
		w.pendingMu.Lock()
		if w.pending == nil {
			w.pending = map[*group]struct{}{}
		}
		w.pending[grp] = struct{}{}
		w.pendingMu.Unlock()
		w.ready <- item{g: grp}
	}
}

// groupDone forgets a FIFO group that has no delivery left to start.
func (w *Worker) groupDone(g *group) {
	w.pendingMu.Lock()
	delete(w.pending, g)
	w.pendingMu.Unlock()
}

// releasePending releases the deliveries of every FIFO group that have not started, at stop: they
// would wait behind the running one for nothing.
func (w *Worker) releasePending() {
	w.pendingMu.Lock()
	var all []*delivery
	for g := range w.pending {
		all = append(all, g.stop()...)
	}
	w.pending = nil
	w.pendingMu.Unlock()
	releaseAll(all)
}

// runner takes batches of deliveries from the ready queue and runs them, until the queue is closed
// (at stop) and drained. The rest of a FIFO group it has started stays with it (carry) and goes
// first into its next batch, so the group's messages run in order, one batch at a time. Each
// delivery ends itself: the runner only schedules.
func (w *Worker) runner(id int) {
	defer w.runners.Done()
	bh, _ := w.cfg.Handler.(BatchHandler)
	n := w.cfg.HandlerBatch
	var (
		carry   []*group
		charged []string // the groups whose runners this one holds (w.fair)
		buf     = make([]*delivery, 0, n)
		timer   *time.Timer
	)
	stopped := w.life.StopContext()
	for {
		if ok, wake := w.size.runActive(id); !ok && len(carry) == 0 {
			// Not needed now (the sizer runs fewer handler calls): wait until it wants more,
			// or the stop, when the runners still active drain the queue.
			select {
			case <-wake:
				continue
			case <-stopped.Done():
				return
			}
		}
		var open bool
		if w.fair != nil {
			buf, charged, open = w.gatherFair(buf[:0], n, charged[:0], &timer)
		} else {
			buf, carry, open = w.gather(buf[:0], n, carry, &timer)
		}
		if len(buf) == 0 && !open {
			return
		}
		if len(buf) == 0 {
			continue
		}
		now := time.Now()
		for _, d := range buf {
			d.take(now)
		}
		if w.stopping.Load() {
			releaseAll(buf)
			for _, g := range carry {
				releaseAll(g.stop())
			}
			carry = carry[:0]
			w.fairDone(buf, charged)
			continue
		}
		run := buf
		switch {
		case !w.e.pause.active():
		case w.e.parkGroups:
			var stop bool
			if run, stop = w.holdGroups(buf); stop {
				releaseAll(buf)
				for _, g := range carry {
					releaseAll(g.stop())
				}
				carry = carry[:0]
				continue
			}
		default:
			run = w.holdBack(buf) // a new slice: buf keeps its capacity of n
		}
		run, release := w.e.fetchPayloads(run)
		began := time.Now()
		switch {
		case len(run) == 0:
		case bh != nil && n > 1:
			w.processBatch(bh, run)
		default:
			for _, d := range run {
				d.run(w.cfg.Handler)
			}
		}
		release()
		if len(run) > 0 {
			w.e.runNanos.Add(int64(time.Since(began)))
			w.e.runMsgs.Add(int64(len(run)))
		}
		w.fairDone(buf, charged)
		carry = slices.DeleteFunc(carry, func(g *group) bool {
			if g.len() > 0 {
				return false
			}
			w.groupDone(g)
			return true
		})
	}
}

// fairDone hands the runners of the groups charged back to w.fair, if the worker has one, once
// the deliveries ds it took have ended.
func (w *Worker) fairDone(ds []*delivery, charged []string) {
	if w.fair != nil {
		w.fair.done(ds, charged)
	}
}

// armLinger starts *timer (made at its first use) to fire after Linger: a batch's wait to fill.
func (w *Worker) armLinger(timer **time.Timer) {
	if *timer == nil {
		*timer = time.NewTimer(w.cfg.Linger)
	} else {
		(*timer).Reset(w.cfg.Linger)
	}
}

// gather fills buf with up to n deliveries: first from the groups it carries, then from the ready
// queue (waiting for the first one, then up to Linger for more). It reports whether the ready
// queue is still open.
func (w *Worker) gather(buf []*delivery, n int, carry []*group, timer **time.Timer) ([]*delivery, []*group, bool) {
	for _, g := range carry {
		if len(buf) == n {
			return buf, carry, true
		}
		buf = g.next(n-len(buf), buf)
	}
	add := func(it item) {
		if it.d != nil {
			buf = append(buf, it.d)
			return
		}
		buf = it.g.next(n-len(buf), buf)
		carry = append(carry, it.g) // forgotten once empty, after the batch
	}
	if len(buf) == 0 {
		it, open := <-w.ready
		if !open {
			return buf, carry, false
		}
		add(it)
	}
	for len(buf) < n { // what is ready now
		select {
		case it, open := <-w.ready:
			if !open {
				return buf, carry, false
			}
			add(it)
			continue
		default:
		}
		break
	}
	if len(buf) == n || w.cfg.Linger <= 0 {
		return buf, carry, true
	}
	// Wait up to Linger for the batch to fill.
	w.armLinger(timer)
	defer (*timer).Stop()
	for len(buf) < n {
		select {
		case it, open := <-w.ready:
			if !open {
				return buf, carry, false
			}
			add(it)
		case <-(*timer).C:
			return buf, carry, true
		}
	}
	return buf, carry, true
}

// holdBack keeps from running, during a pause, the deliveries received before it began: they
// would fail as the ones that began it did. Probes (received during the pause, or a parked one)
// run. The others are parked (pause.go) where the worker parks; else (MaxPerGroup) released. A
// FIFO queue's runners keep theirs instead (holdGroups). It returns the deliveries to run.
//
// Released ones come back only past the pause, as a failed probe does: released at once, each was
// received again within milliseconds by a long poll sent before the pause began (on this worker
// or another one), held back again, and so on: postgres-restart once saw one message received 8
// times in 250 ms, and 10 times in all, which dead-lettered it.
func (w *Worker) holdBack(buf []*delivery) []*delivery {
	_, _, since, _ := w.e.pause.state()
	if since.IsZero() {
		return buf
	}
	var out, back []*delivery
	for _, d := range buf {
		if d.probe || (!d.m.Received.Before(since) && !d.behind()) {
			out = append(out, d)
			continue
		}
		if w.e.parked.ready != nil && d.group == nil && d.refused == nil && w.e.parked.park(d) {
			continue // kept leased until the pause ends (pause.go)
		}
		back = append(back, d)
	}
	releaseAllAfter(back, 3*w.e.pause.left()+time.Second)
	return out
}

// holdGroups keeps a FIFO runner's batch buf through a pause, when it holds messages received
// before the pause began (a message parked in its group is one): released, they would spend a
// receive count each, and a group's head would be probed again and again. The runner waits, the
// messages' leases kept, until the pause ends (it returns buf to run) or until its turn to probe
// (it returns the first message, buf's others put back in their groups, in order). It reports
// stop when the worker stops meanwhile; buf is then still the runner's to release.
func (w *Worker) holdGroups(buf []*delivery) (run []*delivery, stop bool) {
	p := &w.e.pause
	if _, _, since, _ := p.state(); !mustWait(buf, since) {
		return buf, false // received in the pause: the pollers' probes
	}
	for _, d := range buf {
		d.kept = true
		d.lease.keep() // no MaxHold in a pause; a lost lease stays lost, and the message does not run
	}
	w.e.parked.waiting.Add(1)
	defer w.e.parked.waiting.Add(-1)
	ctx := w.life.StopContext()
	for {
		switch {
		case ctx.Err() != nil || w.stopping.Load():
			return nil, true
		case !p.active():
			return buf, false
		case p.startProbe():
			for i := len(buf) - 1; i > 0; i-- {
				buf[i].group.park(buf[i], false)
			}
			buf[0].probe = true
			return buf[:1], false
		}
		_ = p.wait(ctx)
	}
}

// mustWait reports whether a FIFO runner's batch buf, in a pause that began at since, holds a
// message to keep through it: one received before the pause, or one kept in it already (else a
// probe received in the pause that failed would run again at once, and again). A probe runs.
func mustWait(buf []*delivery, since time.Time) bool {
	return slices.ContainsFunc(buf, func(d *delivery) bool { return !d.probe && (d.kept || d.m.Received.Before(since)) })
}

// drain releases everything left in the ready queue once it is closed, at stop.
func (w *Worker) drain() {
	for it := range w.ready {
		if it.d != nil {
			it.d.release()
		} else {
			releaseAll(it.g.stop())
		}
	}
}

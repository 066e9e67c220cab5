package worker

import (
	"context"
	"slices"
	"sync"
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

func (w *Worker) poll() {
	defer w.pollers.Done()
	ctx := w.stopCtx
	fails := 0
	for {
		w.progress.Store(time.Now().UnixNano())
		if err := w.pause.wait(ctx); err != nil {
			return
		}
		var n int
		if w.pause.active() {
			// A probe: one message, once nothing else is outstanding, so that an outage burns
			// few receive counts.
			// The wait for the others is bounded, so that a handler stuck past it (or a slot
			// held by a message that never settles) cannot stop the probes.
			all := int64(w.cfg.capacity())
			actx, cancel := context.WithTimeout(ctx, probeQuiet)
			err := w.slots.Acquire(actx, all)
			cancel()
			switch {
			case err == nil && !w.pause.active():
				w.slots.Release(all)
				continue
			case err == nil:
				w.slots.Release(all - 1)
			case ctx.Err() != nil:
				return
			default:
				if w.slots.Acquire(ctx, 1) != nil {
					return
				}
			}
			n = 1
		} else {
			var err error
			if n, err = w.acquire(ctx, w.minBatch(), w.cfg.BatchSize); err != nil {
				return
			}
		}
		// SQS counts the 12-hour cap of these deliveries from when it takes this request, which
		// is after this moment.
		requested := w.now()
		out, err := w.client.ReceiveMessage(w.recvCtx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &w.queue.URL,
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             w.cfg.waitSeconds(),
			VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
			MessageSystemAttributeNames: receiveAttributes,
			MessageAttributeNames:       allMessageAttributes,
		}, PlainRequestBodies)
		if err != nil {
			w.slots.Release(int64(n))
			if ctx.Err() != nil {
				return
			}
			fails++
			w.metrics.Add(ReceiveErrors, 1)
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
		if len(msgs) < n {
			w.slots.Release(int64(n - len(msgs)))
		}
		if len(msgs) == 0 {
			if w.cfg.WaitTime < 0 && sleep(ctx, shortPollIdle) != nil {
				return
			}
			continue
		}
		w.dispatch(msgs, n, requested)
	}
}

// minBatch is the number of free slots a poller waits for, at most gatherWait, before it
// receives: its share of the slots, up to BatchSize. Receiving for one slot at a time under load
// would multiply the ReceiveMessage calls per message; waiting long would leave slots idle.
func (w *Worker) minBatch() int {
	return max(1, min(w.cfg.BatchSize, w.cfg.capacity()/w.cfg.Pollers))
}

// acquire takes one slot, waiting for it, then waits up to gatherWait for more until it holds
// need, and then takes as many more as are free now, up to batch.
func (w *Worker) acquire(ctx context.Context, need, batch int) (int, error) {
	if err := w.slots.Acquire(ctx, 1); err != nil {
		return 0, err
	}
	n := 1
	for n < batch && w.slots.TryAcquire(1) {
		n++
	}
	if n < need {
		gctx, cancel := context.WithTimeout(ctx, gatherWait)
		for n < need && w.slots.Acquire(gctx, 1) == nil {
			n++
		}
		cancel()
	}
	return n, nil
}

// item is one entry of the ready queue: a message, or the messages of one FIFO group from one
// receive.
type item struct {
	m *Message
	g *group
}

// dispatch queues the received messages for the runners, each holding one of the slots taken for
// the receive. Every message's lease (its heartbeat) starts here, so that a message waiting for
// its turn is covered as a running one is.
func (w *Worker) dispatch(received []types.Message, slots int, requested time.Time) {
	msgs := make([]*Message, 0, len(received))
	arrived := time.Now()
	for i := range received {
		m := newMessage(&received[i], requested)
		m.arrived = arrived
		m.refused = UnwrapSNS(m, w.cfg.SNS)
		startHeartbeat(w.sw, m, w.vis, w.now, w.cfg.MaxHold)
		msgs = append(msgs, m)
	}
	w.metrics.Add(Received, len(msgs))
	if len(msgs) > slots {
		// A server returned more than asked for; those have no slot.
		w.sw.release(msgs[slots:])
		msgs = msgs[:slots]
	}
	if w.stopping.Load() {
		w.sw.release(msgs)
		w.slots.Release(int64(len(msgs)))
		return
	}
	w.held.Add(int64(len(msgs)))
	if !w.queue.FIFO {
		for _, m := range msgs {
			w.ready <- item{m: m}
		}
		return
	}
	for _, g := range groups(msgs) {
		grp := &group{rest: g}
		for i, m := range g {
			m.group, m.pos = grp, i
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

// groupDone forgets a FIFO group that has no message left to start.
func (w *Worker) groupDone(g *group) {
	w.pendingMu.Lock()
	delete(w.pending, g)
	w.pendingMu.Unlock()
}

// releasePending releases the messages of every FIFO group that have not started, at stop: they
// would wait behind the running one for nothing.
func (w *Worker) releasePending() {
	w.pendingMu.Lock()
	var all []*Message
	for g := range w.pending {
		all = append(all, g.stop()...)
	}
	w.pending = nil
	w.pendingMu.Unlock()
	w.release(all, true)
}

// group is the messages of one FIFO group from one receive, not yet started. It is where the
// FIFO rule lives: once a message of the group is not done (it failed, was not started, or was
// released), the group is halted, and none of its later messages runs in this delivery: they are
// released, to come back in order after the one not done. Everything that decides a message's
// fate asks the group (see Worker.halt and Batch.Runnable).
type group struct {
	mu     sync.Mutex
	rest   []*Message // emptied for good by halt
	halted bool
	at     int // the position of the first message not done, once halted
}

// next removes and returns up to n messages from the front of the group.
func (g *group) next(n int, out []*Message) []*Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := min(n, len(g.rest))
	out = append(out, g.rest[:k]...)
	g.rest = g.rest[k:]
	return out
}

// len returns the number of messages waiting in the group.
func (g *group) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.rest)
}

// halt records that m is not done and returns the messages the group still held (all after m),
// to release.
func (g *group) halt(m *Message) []*Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.halted || m.pos < g.at {
		g.halted, g.at = true, m.pos
	}
	rest := g.rest
	g.rest = nil
	return rest
}

// stop empties the group, at stop, and returns what it held.
func (g *group) stop() []*Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := g.rest
	g.rest = nil
	return rest
}

// behind reports whether m comes after a message of its group that is not done: it must not run.
func (g *group) behind(m *Message) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.halted && m.pos > g.at
}

// halt applies the FIFO rule to m, a message that is not done: the later messages of its group
// that the worker still holds are released (they must not overtake it), and those already in a
// batch are not run (Batch.Runnable).
func (w *Worker) halt(m *Message) {
	if m.group != nil {
		w.release(m.group.halt(m), true)
	}
}

// behind reports whether m must not run: it comes after a message of its FIFO group that is not
// done.
func behind(m *Message) bool { return m.group != nil && m.group.behind(m) }

// groups splits msgs by MessageGroupId, keeping their order.
func groups(msgs []*Message) [][]*Message {
	var out [][]*Message
	idx := make(map[string]int, len(msgs))
	for _, m := range msgs {
		i, ok := idx[m.GroupID]
		if !ok {
			i = len(out)
			idx[m.GroupID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], m)
	}
	return out
}

// runner takes batches of messages from the ready queue and runs them, until the queue is closed
// (at stop) and drained. The rest of a FIFO group it has started stays with it (carry) and goes
// first into its next batch, so the group's messages run in order, one batch at a time.
func (w *Worker) runner() {
	defer w.runners.Done()
	bh, _ := w.cfg.Handler.(BatchHandler)
	n := w.cfg.HandlerBatch
	var (
		carry []*group
		buf   = make([]*Message, 0, n)
		ok    = make([]bool, n)
		timer *time.Timer
	)
	for {
		var open bool
		buf, carry, open = w.gather(buf[:0], n, carry, &timer)
		if len(buf) == 0 && !open {
			return
		}
		if len(buf) == 0 {
			continue
		}
		now := time.Now()
		for _, m := range buf {
			w.metrics.Observe(HeldWait, now.Sub(m.arrived))
		}
		w.held.Add(-int64(len(buf)))
		if w.stopping.Load() {
			w.release(buf, false)
			for _, g := range carry {
				w.release(g.stop(), true)
			}
			carry = carry[:0]
			continue
		}
		run := buf
		if w.pause.active() {
			run = w.holdBack(buf) // a new slice: buf keeps its capacity of n
		}
		ok = ok[:len(run)]
		if bh != nil && n > 1 {
			w.processBatch(bh, run, ok)
		} else {
			for i, m := range run {
				ok[i] = w.process(m)
			}
		}
		for i, m := range run {
			w.slots.Release(1)
			if !ok[i] {
				w.halt(m)
			}
		}
		carry = slices.DeleteFunc(carry, func(g *group) bool {
			if g.len() > 0 {
				return false
			}
			w.groupDone(g)
			return true
		})
	}
}

// gather fills buf with up to n messages: first from the groups it carries, then from the ready
// queue (waiting for the first one, then up to Linger for more). It reports whether the ready
// queue is still open.
func (w *Worker) gather(buf []*Message, n int, carry []*group, timer **time.Timer) ([]*Message, []*group, bool) {
	for _, g := range carry {
		if len(buf) == n {
			return buf, carry, true
		}
		buf = g.next(n-len(buf), buf)
	}
	add := func(it item) {
		if it.m != nil {
			buf = append(buf, it.m)
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
	if *timer == nil {
		*timer = time.NewTimer(w.cfg.Linger)
	} else {
		(*timer).Reset(w.cfg.Linger)
	}
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

// holdBack releases, during a pause, the messages received before it began: they would fail
// as the ones that began it did, and burn a receive each. Probes (received during the pause) run.
// The rest of the FIFO group of a released message is released with it. It returns the messages
// to run.
func (w *Worker) holdBack(buf []*Message) []*Message {
	_, _, since, _ := w.pause.state()
	if since.IsZero() {
		return buf
	}
	var out, back []*Message
	for _, m := range buf {
		if !m.Received.Before(since) && !behind(m) {
			out = append(out, m)
			continue
		}
		back = append(back, m)
		w.halt(m)
	}
	w.release(back, false)
	return out
}

// release makes msgs visible again without running them, and frees their slots. held says
// whether they are still counted as held.
func (w *Worker) release(msgs []*Message, held bool) {
	if len(msgs) == 0 {
		return
	}
	w.sw.release(msgs)
	w.slots.Release(int64(len(msgs)))
	if held {
		w.held.Add(-int64(len(msgs)))
	}
}

// drain releases everything left in the ready queue once it is closed, at stop.
func (w *Worker) drain() {
	for it := range w.ready {
		if it.m != nil {
			w.release([]*Message{it.m}, true)
		} else {
			w.release(it.g.stop(), true)
		}
	}
}

package worker

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

var receiveAttributes = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
var allMessageAttributes = []string{"All"}

// The intake: pollers take free slots, receive up to that many messages, lease each one, and
// start them; the messages of one FIFO group run in order in one goroutine.

func (w *Worker) poll() {
	defer w.pollers.Done()
	ctx := w.stopCtx
	fails := 0
	for {
		w.progress.Store(time.Now().UnixNano())
		if err := w.pause.wait(ctx); err != nil {
			return
		}
		need, batch := w.minBatch(), w.cfg.BatchSize
		if w.pause.active() {
			need, batch = 1, 1 // a probe: one message, so an outage burns few receive counts
		}
		n, err := w.acquire(ctx, need, batch)
		if err != nil {
			return
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
// receives: its share of Concurrency, up to BatchSize. Receiving for one slot at a time under load
// would multiply the ReceiveMessage calls per message; waiting long would leave slots idle.
func (w *Worker) minBatch() int {
	return max(1, min(w.cfg.BatchSize, w.cfg.Concurrency/w.cfg.Pollers))
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

// dispatch starts the received messages, each holding one of the slots taken for the receive.
// On a FIFO queue, the messages of one group run in order in one goroutine.
// Every message's lease (its heartbeat) starts here, so that a message waiting for its turn is
// covered as a running one is.
func (w *Worker) dispatch(received []types.Message, slots int, requested time.Time) {
	msgs := make([]*Message, 0, len(received))
	for i := range received {
		m := newMessage(&received[i], requested)
		m.refused = UnwrapSNS(m, w.cfg.SNS)
		m.lease = startHeartbeat(w.sw, m, w.vis, w.now)
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
	if !w.queue.FIFO {
		for _, m := range msgs {
			w.handlers.Add(1)
			go w.runOne(m)
		}
		return
	}
	for _, g := range groups(msgs) {
		w.handlers.Add(1)
		go w.runGroup(&group{rest: g})
	}
}

// group is the messages of one FIFO group from one receive, not yet started.
type group struct {
	mu       sync.Mutex
	rest     []*Message
	released bool
}

// next returns the next message to run, or nil when the group is done or was released.
func (g *group) next() *Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released || len(g.rest) == 0 {
		return nil
	}
	m := g.rest[0]
	g.rest = g.rest[1:]
	return m
}

// len returns the number of messages waiting in the group.
func (g *group) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.rest)
}

// take empties the group and returns what it held.
func (g *group) take() []*Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := g.rest
	g.rest, g.released = nil, true
	return rest
}

// releasePending releases the messages of every FIFO group that have not started, at stop:
// they would wait behind the running one for nothing.
func (w *Worker) releasePending() {
	w.pendingMu.Lock()
	var all []*Message
	for g := range w.pending {
		all = append(all, g.take()...)
	}
	w.pendingMu.Unlock()
	w.sw.release(all)
	w.slots.Release(int64(len(all)))
}

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

func (w *Worker) runOne(m *Message) {
	defer w.handlers.Done()
	defer w.slots.Release(1)
	if w.stopping.Load() {
		w.sw.release([]*Message{m})
		return
	}
	w.process(m)
}

func (w *Worker) runGroup(g *group) {
	defer w.handlers.Done()
	w.pendingMu.Lock()
	if w.pending == nil {
		w.pending = map[*group]struct{}{}
	}
	w.pending[g] = struct{}{}
	w.pendingMu.Unlock()
	defer func() {
		w.pendingMu.Lock()
		delete(w.pending, g)
		w.pendingMu.Unlock()
	}()
	for {
		if w.stopping.Load() {
			rest := g.take()
			w.sw.release(rest)
			w.slots.Release(int64(len(rest)))
			return
		}
		m := g.next()
		if m == nil {
			return
		}
		ok := w.process(m)
		w.slots.Release(1)
		if !ok {
			// Later messages of the group must not overtake the failed one.
			rest := g.take()
			w.sw.release(rest)
			w.slots.Release(int64(len(rest)))
			return
		}
	}
}

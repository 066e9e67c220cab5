package worker

import (
	"sync"
	"time"
)

const (
	// deleteAttempts is how often a delete is tried before the message is left to its
	// redelivery (which the inbox turns into a duplicate).
	deleteAttempts = 4
	// maxDeleteCalls bounds the DeleteMessageBatch calls in flight: as many as the pollers'
	// receives, so that deletes (ten a call, one round trip each, like a receive) keep up with
	// what the pollers bring, off the handlers' path. The senders start only while all that run
	// are busy. With 32, SQS 50 ms away capped deletes at 6,400 messages a second, and a full
	// delete queue held the handlers back.
	maxDeleteCalls = MaxPollers
)

type pendingDelete struct {
	m    *Message
	done time.Time // when the handler succeeded
}

// deleter batches the deletes of finished messages into DeleteMessageBatch calls of up to ten,
// sent when a batch is full or interval after its first entry, by up to maxDeleteCalls sender
// goroutines. The senders live as long as the deleter: a goroutine per call would grow a new
// stack for the SDK's deep call chain each time (copying it, about 4 µs of CPU a message).
type deleter struct {
	sw       *sqsWriter
	interval time.Duration
	in       chan pendingDelete
	work     chan []pendingDelete // unbuffered: a send succeeds when a sender is idle
	senders  int                  // started (run's goroutine only)
	sends    sync.WaitGroup
	done     chan struct{}
}

// newDeleter starts a deleter; queued is how many pending deletes it buffers before add blocks.
func newDeleter(sw *sqsWriter, interval time.Duration, queued int) *deleter {
	d := &deleter{
		sw:       sw,
		interval: interval,
		in:       make(chan pendingDelete, queued),
		work:     make(chan []pendingDelete),
		done:     make(chan struct{}),
	}
	go d.run()
	return d
}

// add queues m for deletion. It blocks when deletes fall behind, which holds back handlers.
func (d *deleter) add(m *Message) { d.in <- pendingDelete{m: m, done: time.Now()} }

// close sends what is pending and waits for every delete to end.
func (d *deleter) close() {
	close(d.in)
	<-d.done
}

func (d *deleter) run() {
	defer close(d.done)
	batch := make([]pendingDelete, 0, MaxBatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch = make([]pendingDelete, 0, MaxBatchSize)
		select {
		case d.work <- b:
			return
		default:
		}
		if d.senders < maxDeleteCalls {
			d.senders++
			d.sends.Add(1)
			go d.sender()
		}
		d.work <- b // blocks while maxDeleteCalls calls are in flight
	}
	for {
		select {
		case p, ok := <-d.in:
			if !ok {
				timer.Stop()
				flush()
				close(d.work)
				d.sends.Wait()
				return
			}
			batch = append(batch, p)
			if len(batch) == MaxBatchSize {
				timer.Stop()
				flush()
			} else if len(batch) == 1 {
				timer.Reset(d.interval)
			}
		case <-timer.C:
			flush()
		}
	}
}

// sender sends the batches it is given until the deleter closes.
func (d *deleter) sender() {
	defer d.sends.Done()
	for b := range d.work {
		d.send(b)
	}
}

// send deletes b, retrying only the entries that failed.
func (d *deleter) send(b []pendingDelete) {
	for attempt := 1; len(b) > 0; attempt++ {
		retry, err := d.sw.deleteBatch(b)
		if len(retry) == 0 {
			return
		}
		if attempt == deleteAttempts {
			d.sw.metrics.Add(DeleteFailures, len(retry))
			d.sw.log.Warn("worker: delete failed; the messages will be delivered again and found done",
				"messages", len(retry), "error", err)
			return
		}
		if err != nil && len(retry) == 1 && d.sw.gone(err) {
			return
		}
		b = retry
		time.Sleep(jitter(expo(50*time.Millisecond, time.Second, attempt)))
	}
}

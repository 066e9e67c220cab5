package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const (
	// deleteAttempts is how often a delete is tried before the message is left to its
	// redelivery (which the inbox turns into a duplicate).
	deleteAttempts = 4
	// maxDeleteCalls bounds the DeleteMessageBatch calls in flight.
	maxDeleteCalls = 8
)

type pendingDelete struct {
	m    *Message
	done time.Time // when the handler succeeded
}

// deleter batches the deletes of finished messages into DeleteMessageBatch calls of up to ten,
// sent when a batch is full or DeleteInterval after its first entry.
type deleter struct {
	w     *Worker
	in    chan pendingDelete
	calls chan struct{} // semaphore of calls in flight
	sends sync.WaitGroup
	done  chan struct{}
}

func newDeleter(w *Worker) *deleter {
	d := &deleter{
		w:     w,
		in:    make(chan pendingDelete, w.cfg.Concurrency+MaxBatchSize),
		calls: make(chan struct{}, maxDeleteCalls),
		done:  make(chan struct{}),
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
		d.calls <- struct{}{}
		d.sends.Add(1)
		go func() {
			defer d.sends.Done()
			defer func() { <-d.calls }()
			d.send(b)
		}()
	}
	for {
		select {
		case p, ok := <-d.in:
			if !ok {
				timer.Stop()
				flush()
				d.sends.Wait()
				return
			}
			batch = append(batch, p)
			if len(batch) == MaxBatchSize {
				timer.Stop()
				flush()
			} else if len(batch) == 1 {
				timer.Reset(d.w.cfg.DeleteInterval)
			}
		case <-timer.C:
			flush()
		}
	}
}

// send deletes b, retrying only the entries that failed.
func (d *deleter) send(b []pendingDelete) {
	w := d.w
	for attempt := 1; len(b) > 0; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.workCtx), callTimeout)
		entries := make([]types.DeleteMessageBatchRequestEntry, len(b))
		for i := range b {
			entries[i] = types.DeleteMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(b[i].m.ReceiptHandle),
			}
		}
		out, err := w.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &w.queue.URL, Entries: entries}, PlainRequestBodies)
		cancel()
		var retry []pendingDelete
		if err != nil {
			retry = b
		} else {
			failed := make(map[int]string, len(out.Failed))
			for _, f := range out.Failed {
				if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(b) {
					failed[i] = aws.ToString(f.Code)
				}
			}
			now := time.Now()
			for i, p := range b {
				code, bad := failed[i]
				if bad && !goneCode(code, w.queue.FIFO) {
					retry = append(retry, p)
					continue
				}
				// Gone means deleted already, or redelivered: either way no longer ours.
				w.metrics.Add(Deleted, 1)
				w.deleted.Add(1)
				w.metrics.Observe(CommitToDelete, now.Sub(p.done))
			}
		}
		if len(retry) == 0 {
			return
		}
		if attempt == deleteAttempts {
			w.metrics.Add(DeleteFailures, len(retry))
			w.log.Warn("worker: delete failed; the messages will be delivered again and found done",
				"messages", len(retry), "error", err)
			return
		}
		if err != nil && len(retry) == 1 && isGone(err, w.queue.FIFO) {
			return
		}
		b = retry
		time.Sleep(jitter(expo(50*time.Millisecond, time.Second, attempt)))
	}
}

package worker

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// sqsWriter makes every SQS call that changes a received message: deletes, visibility changes
// (retries and heartbeats) and releases. The deleter and the heartbeats hold it, not the Worker.
type sqsWriter struct {
	client  SQSClient
	opt     func(*sqs.Options) // passed on every call (callOption)
	url     string
	fifo    bool
	metrics Metrics
	log     *slog.Logger
	// base carries the values of Start's context to every call; it is never cancelled, so that
	// a stop still flushes deletes and releases.
	base context.Context

	noBatchVisibility atomic.Bool  // ChangeMessageVisibilityBatch is not supported (GoAws)
	extended          atomic.Int64 // unix nanoseconds of the last successful extension (a sign of life)
	released          atomic.Int64 // messages released, for the stop's log line
	deleted           atomic.Int64 // messages deleted, likewise
}

// callContext bounds one call.
func (s *sqsWriter) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.base, callTimeout)
}

// gone reports whether err, from a call that names a message by its receipt handle, says the
// message is no longer ours.
func (s *sqsWriter) gone(err error) bool { return isGone(err, s.fifo) }

// extend sets m's visibility to secs from now. ctx bounds the call.
func (s *sqsWriter) extend(ctx context.Context, m *Message, secs int32) error {
	_, err := s.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          &s.url,
		ReceiptHandle:     &m.ReceiptHandle,
		VisibilityTimeout: secs,
	}, s.opt)
	if err == nil && secs > 0 {
		s.extended.Store(time.Now().UnixNano())
	}
	return err
}

// changeVisibility makes m visible again after secs, for a retry.
func (s *sqsWriter) changeVisibility(m *Message, secs int32) {
	ctx, cancel := s.callContext()
	defer cancel()
	if err := s.extend(ctx, m, secs); err != nil && !s.gone(err) {
		s.log.Warn("worker: could not change a message's visibility; it returns after the visibility timeout",
			"message_id", m.ID, "error", err)
	}
}

// release makes msgs visible again at once, without running them. Their leases must have ended
// (delivery.release stops them), so that no extension lands after the release.
func (s *sqsWriter) release(msgs []*Message) { s.releaseAfter(msgs, 0, time.Time{}) }

// releaseAfter makes msgs visible again after delay (now: the clock of the 12-hour cap), without
// running them; release, with a delay. Their leases must have ended.
func (s *sqsWriter) releaseAfter(msgs []*Message, delay time.Duration, now time.Time) {
	if len(msgs) == 0 {
		return
	}
	s.released.Add(int64(len(msgs)))
	s.metrics.Add(Released, len(msgs))
	secs := func(m *Message) int32 {
		if delay <= 0 {
			return 0
		}
		return visibilitySeconds(m, delay, now)
	}
	ctx, cancel := s.callContext()
	defer cancel()
	for len(msgs) > 0 {
		n := min(len(msgs), MaxBatchSize)
		batch := msgs[:n]
		msgs = msgs[n:]
		if !s.noBatchVisibility.Load() && len(batch) > 1 {
			batch = s.releaseBatch(ctx, batch, secs)
		}
		for _, m := range batch {
			if err := s.extend(ctx, m, secs(m)); err != nil && !s.gone(err) {
				s.log.Warn("worker: could not release a message; it returns after the visibility timeout", "message_id", m.ID, "error", err)
			}
		}
	}
}

// releaseBatch releases batch (each after secs of it) with one ChangeMessageVisibilityBatch call and returns the messages
// still to release one by one: the failed entries, or all of them if the server lacks the call.
func (s *sqsWriter) releaseBatch(ctx context.Context, batch []*Message, secs func(*Message) int32) []*Message {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
	for i, m := range batch {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: secs(m),
		}
	}
	out, err := s.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: &s.url, Entries: entries,
	}, s.opt)
	if err != nil {
		if ctx.Err() == nil {
			// GoAws does not implement the batch call; use single calls from now on.
			s.noBatchVisibility.Store(true)
			s.log.Debug("worker: ChangeMessageVisibilityBatch failed; using single calls", "error", err)
		}
		return batch
	}
	var failed []*Message
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(batch) && !goneCode(aws.ToString(f.Code), s.fifo) {
			failed = append(failed, batch[i])
		}
	}
	return failed
}

// deleteBatch deletes b (at most ten) with one DeleteMessageBatch call and returns the entries
// to try again, and the call's error, if the whole call failed.
func (s *sqsWriter) deleteBatch(b []pendingDelete) (retry []pendingDelete, err error) {
	ctx, cancel := s.callContext()
	defer cancel()
	entries := make([]types.DeleteMessageBatchRequestEntry, len(b))
	for i := range b {
		entries[i] = types.DeleteMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(b[i].m.ReceiptHandle),
		}
	}
	out, err := s.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &s.url, Entries: entries}, s.opt)
	if err != nil {
		return b, err
	}
	failed := make(map[int]string, len(out.Failed))
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(b) {
			failed[i] = aws.ToString(f.Code)
		}
	}
	now := time.Now()
	for i, p := range b {
		code, bad := failed[i]
		if bad && !goneCode(code, s.fifo) {
			retry = append(retry, p)
			continue
		}
		// Gone means deleted already, or redelivered: either way no longer ours.
		s.metrics.Add(Deleted, 1)
		s.deleted.Add(1)
		s.metrics.Observe(CommitToDelete, now.Sub(p.done))
	}
	return retry, nil
}

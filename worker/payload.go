package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The reserved message attributes that mark a message whose payload was offloaded (to S3, by
// AWS's SQS and SNS extended client libraries or by package s3payload): the body is then a
// pointer to the payload, and the attribute's Number value is the payload's size in bytes.
// Producers must not set them on ordinary messages.
const (
	// PayloadSizeAttribute is the attribute the current extended clients write, shared by the
	// SQS and SNS ones.
	PayloadSizeAttribute = "ExtendedPayloadSize"
	// LegacyPayloadSizeAttribute is the attribute older SQS extended clients write (the Java one
	// still does by default).
	LegacyPayloadSizeAttribute = "SQSLargePayloadSize"
)

// OffloadedSize returns the value of the message's reserved payload-size attribute
// ([PayloadSizeAttribute], else [LegacyPayloadSizeAttribute]) and whether it has one: a message
// that has one says its body is a pointer to a payload stored elsewhere. Only the attribute
// marks it; a body that merely looks like a pointer does not.
func (m *Message) OffloadedSize() (string, bool) {
	if v, ok := m.Attributes[PayloadSizeAttribute]; ok {
		return derefString(v.StringValue), true
	}
	if v, ok := m.Attributes[LegacyPayloadSizeAttribute]; ok {
		return derefString(v.StringValue), true
	}
	return "", false
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// PayloadFetcher fetches the payloads of messages whose body points to a payload stored
// elsewhere ([Message.OffloadedSize]). Package s3payload implements it for S3. The worker calls
// Fetch on the messages a runner is about to hand to the handler, before the handler runs and
// outside any transaction of the handler's, with a context bounded by Config.HandlerTimeout.
type PayloadFetcher interface {
	// Fetch replaces the Body (and removes the reserved size attribute) of each message of ms
	// that points to a payload with the payload, and sets its Offloaded. errs[i] is why the i-th
	// could not be fetched (nil when it was, or needed no fetch): that message goes the
	// retry-then-DLQ way without reaching the handler. release frees the memory the payloads
	// hold against the fetcher's bound; the worker calls it once, when the messages' handlers
	// are done. errs has len(ms) entries; release is never nil.
	Fetch(ctx context.Context, ms []*Message) (release func(), errs []error)
}

// ErrOffloadedPayload is the error of a message that points to an offloaded payload
// ([Message.OffloadedSize]) received by a worker without Config.Payloads: its body is not the
// payload, so the handler must not see it. It goes the retry-then-DLQ way.
var ErrOffloadedPayload = errors.New("worker: the message's payload is offloaded (it carries a reserved payload-size attribute), and Config.Payloads is nil")

// offloadRefusal returns why a message the worker cannot fetch must not reach its handler, or nil.
func offloadRefusal(m *Message, fetcher PayloadFetcher) error {
	if fetcher != nil {
		return nil
	}
	if size, ok := m.OffloadedSize(); ok {
		return fmt.Errorf("%w; size %q", ErrOffloadedPayload, size)
	}
	return nil
}

// fetchPayloads fetches the offloaded payloads of the deliveries in ds that have one. Those that
// fail are settled at once (retry, then the DLQ); it returns the others and the release of what
// the payloads hold. A message behind one of its FIFO group that failed is not run: the runner's
// paths check that.
func (e *engine) fetchPayloads(ds []*delivery) ([]*delivery, func()) {
	f := e.cfg.Payloads
	if f == nil {
		return ds, func() {}
	}
	var ms []*Message
	var idx []int
	for i, d := range ds {
		if _, ok := d.m.OffloadedSize(); ok && d.refused == nil {
			ms = append(ms, d.m)
			idx = append(idx, i)
		}
	}
	if len(ms) == 0 {
		return ds, func() {}
	}
	ctx, cancel := e.work, context.CancelFunc(func() {})
	if e.cfg.HandlerTimeout > 0 {
		ctx, cancel = context.WithTimeout(e.work, e.cfg.HandlerTimeout)
	}
	start := time.Now()
	release, errs := f.Fetch(ctx, ms)
	cancel()
	e.metrics.Observe(PayloadFetchDuration, time.Since(start))
	if len(errs) != len(ms) {
		err := fmt.Errorf("worker: PayloadFetcher.Fetch returned %d results for %d messages", len(errs), len(ms))
		errs = make([]error, len(ms))
		for i := range errs {
			errs[i] = err
		}
	}
	if release == nil {
		release = func() {}
	}
	failed := 0
	for j, err := range errs {
		if err != nil {
			ds[idx[j]].refused = fmt.Errorf("worker: fetch of the offloaded payload: %w", err)
			failed++
		}
	}
	e.metrics.Add(PayloadsFetched, len(ms)-failed)
	if failed == 0 {
		return ds, release
	}
	out := ds[:0:0]
	for _, d := range ds {
		if d.refused != nil {
			d.lease.stop()
			d.notStarted()
			continue
		}
		out = append(out, d)
	}
	return out, release
}

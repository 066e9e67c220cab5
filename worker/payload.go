package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sqsinbox/sqsinbox/s3payload"
)

// The reserved message attributes that mark a message whose payload was offloaded (to S3, by
// AWS's SQS and SNS extended client libraries or by package s3payload): the body is then a
// pointer to the payload, and the attribute's Number value is the payload's size in bytes.
// Producers must not set them on ordinary messages.
const (
	// PayloadSizeAttribute is the attribute the current extended clients write, shared by the
	// SQS and SNS ones.
	PayloadSizeAttribute = s3payload.SizeAttribute
	// LegacyPayloadSizeAttribute is the attribute older SQS extended clients write (the Java one
	// still does by default).
	LegacyPayloadSizeAttribute = s3payload.LegacySizeAttribute
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

// takePayload puts a fetched payload in the place of the pointer body: the reserved size
// attribute goes (on a copy of the attributes, which other holders may share), Offloaded says
// where the payload came from.
func (m *Message) takePayload(p s3payload.Payload) {
	m.Body = p.Data
	m.Attributes = maps.Clone(m.Attributes)
	delete(m.Attributes, PayloadSizeAttribute)
	delete(m.Attributes, LegacyPayloadSizeAttribute)
	m.Offloaded = p.From
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// PayloadFetcher fetches the payloads of messages whose body points to a payload stored
// elsewhere ([Message.OffloadedSize]); *s3payload.Reader is one, for S3. The worker calls Fetch
// with the [s3payload.Ref] of each offloaded message a runner is about to hand to the handler,
// before the handler runs and outside any transaction of the handler's, with a context bounded by
// Config.HandlerTimeout.
type PayloadFetcher interface {
	// Fetch returns the payload of each ref, payloads[i] for refs[i]: a payload with Err set
	// is why that one could not be fetched, and its message goes the retry-then-DLQ way without
	// reaching the handler. The worker puts each fetched payload into its message (the Body;
	// the reserved size attribute removed; Offloaded set to From). release frees the memory the
	// payloads hold against the fetcher's bound; the worker calls it once, when the messages'
	// handlers are done. payloads has len(refs) entries; release is never nil.
	Fetch(ctx context.Context, refs []s3payload.Ref) (payloads []s3payload.Payload, release func())
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
	var refs []s3payload.Ref
	var idx []int
	for i, d := range ds {
		if size, ok := d.m.OffloadedSize(); ok && d.refused == nil {
			refs = append(refs, s3payload.Ref{Body: d.m.Body, Size: size})
			idx = append(idx, i)
		}
	}
	if len(refs) == 0 {
		return ds, func() {}
	}
	ctx, cancel := e.work, context.CancelFunc(func() {})
	if e.cfg.HandlerTimeout > 0 {
		ctx, cancel = context.WithTimeout(e.work, e.cfg.HandlerTimeout)
	}
	start := time.Now()
	payloads, release := f.Fetch(ctx, refs)
	cancel()
	e.metrics.Observe(PayloadFetchDuration, time.Since(start))
	if len(payloads) != len(refs) {
		err := fmt.Errorf("worker: PayloadFetcher.Fetch returned %d results for %d messages", len(payloads), len(refs))
		payloads = make([]s3payload.Payload, len(refs))
		for i := range payloads {
			payloads[i].Err = err
		}
	}
	if release == nil {
		release = func() {}
	}
	failed := 0
	for j, p := range payloads {
		d := ds[idx[j]]
		if p.Err != nil {
			d.refused = fmt.Errorf("worker: fetch of the offloaded payload: %w", p.Err)
			failed++
			continue
		}
		d.m.takePayload(p)
	}
	e.metrics.Add(PayloadsFetched, len(refs)-failed)
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

package workerotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Metrics implements [worker.Metrics] with OpenTelemetry instruments. Every measurement carries
// messaging.system aws_sqs and messaging.destination.name; the conventions' two also carry
// messaging.operation.name.
//
//   - [worker.Received]: messaging.client.consumed.messages (operation receive)
//   - [worker.HandlerDuration]: messaging.process.duration, in seconds (operation process)
//   - every other [worker.Counter] c: the counter sqsinbox.worker.<c>, for example
//     sqsinbox.worker.duplicates
//   - [worker.CommitToDelete]: sqsinbox.worker.commit_to_delete.duration, in seconds
//   - the handlers in flight: the gauge sqsinbox.worker.in_flight
//   - with Config.MaxPerGroup on a standard queue (a fair queue; [worker.GroupMetrics]), per
//     message group: the observable gauges sqsinbox.worker.group.in_flight,
//     sqsinbox.worker.group.waiting and sqsinbox.worker.group.oldest_wait (seconds), with
//     [KeyGroupID] for each of the top [worker.TopGroups] groups by in-flight messages and one
//     for the rest ([worker.OtherGroups]), as of the worker's last report (every second); a
//     group that leaves the top is no longer observed, so the series stay bounded
type Metrics struct {
	counters   map[worker.Counter]counter
	histograms map[worker.Histogram]histogram
	inFlight   metric.Int64Gauge
	base       []metric.RecordOption

	baseAttrs []attribute.KeyValue
	groupsMu  sync.Mutex
	groups    []worker.GroupStat // the worker's last report
}

type counter struct {
	metric.Int64Counter
	opts []metric.AddOption
}

type histogram struct {
	metric.Float64Histogram
	opts []metric.RecordOption
}

// Units and descriptions of the sqsinbox.worker.* counters. A counter the worker adds later gets
// "{message}" and a description naming it.
var counterDocs = map[worker.Counter][2]string{
	worker.Processed:          {"{message}", "Messages whose handler succeeded."},
	worker.Duplicates:         {"{message}", "Messages whose event was processed before (deleted without running)."},
	worker.Failed:             {"{message}", "Handler errors, panics and timeouts."},
	worker.Retried:            {"{message}", "Messages handed back for a later delivery."},
	worker.Blocked:            {"{message}", "Messages handed back because another consumer held their event's claim."},
	worker.Discarded:          {"{message}", "Messages deleted without effect because the handler said so."},
	worker.Released:           {"{message}", "Messages made visible again without being run."},
	worker.Deleted:            {"{message}", "Messages deleted from the queue."},
	worker.DeleteFailures:     {"{message}", "Deletes given up on (the message will be delivered again)."},
	worker.Heartbeats:         {"{extension}", "Visibility extensions of running handlers."},
	worker.ReceiveErrors:      {"{call}", "Failed ReceiveMessage calls."},
	worker.SQSRequests:        {"{request}", "SQS API calls the worker made (what SQS bills; divided by received: the requests a message costs)."},
	worker.ReceiveRequests:    {"{request}", "ReceiveMessage calls."},
	worker.EmptyReceives:      {"{request}", "ReceiveMessage calls that returned no message."},
	worker.DeleteRequests:     {"{request}", "DeleteMessageBatch and DeleteMessage calls."},
	worker.VisibilityRequests: {"{request}", "ChangeMessageVisibility(Batch) calls: heartbeats, retry delays and releases."},
}

// processBuckets are the conventions' advice for messaging.process.duration, in seconds, with
// the longer handlers a worker allows added.
var processBuckets = []float64{.005, .01, .025, .05, .075, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10, 30, 60, 300}

// NewMetrics creates the instruments for the worker of queue (its name or URL) with meter, or
// with the global meter provider's meter for [ScopeName] when meter is nil.
func NewMetrics(meter metric.Meter, queue string) (*Metrics, error) {
	if meter == nil {
		meter = otel.GetMeterProvider().Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	}
	_, dest := destination(queue)
	base := append([]attribute.KeyValue{semconv.MessagingSystemAWSSQS}, dest...)
	set := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	baseSet := set()
	m := &Metrics{
		counters:   map[worker.Counter]counter{},
		histograms: map[worker.Histogram]histogram{},
		base:       []metric.RecordOption{metric.WithAttributeSet(baseSet)},
	}
	for _, c := range worker.Counters {
		var (
			inst metric.Int64Counter
			s    = baseSet
			err  error
		)
		if c == worker.Received {
			var cm messagingconv.ClientConsumedMessages
			cm, err = messagingconv.NewClientConsumedMessages(meter)
			inst, s = cm.Inst(), set(semconv.MessagingOperationName("receive"))
		} else {
			doc, ok := counterDocs[c]
			if !ok {
				doc = [2]string{"{message}", fmt.Sprintf("The worker's %s counter.", c)}
			}
			inst, err = meter.Int64Counter("sqsinbox.worker."+string(c), metric.WithUnit(doc[0]), metric.WithDescription(doc[1]))
		}
		if err != nil {
			return nil, fmt.Errorf("workerotel: counter %s: %w", c, err)
		}
		m.counters[c] = counter{inst, []metric.AddOption{metric.WithAttributeSet(s)}}
	}
	for _, h := range worker.Histograms {
		var (
			inst metric.Float64Histogram
			s    = baseSet
			err  error
		)
		switch h {
		case worker.HandlerDuration:
			var pd messagingconv.ProcessDuration
			pd, err = messagingconv.NewProcessDuration(meter, metric.WithExplicitBucketBoundaries(processBuckets...))
			inst, s = pd.Inst(), set(semconv.MessagingOperationName("process"))
		case worker.CommitToDelete:
			inst, err = meter.Float64Histogram("sqsinbox.worker.commit_to_delete.duration", metric.WithUnit("s"),
				metric.WithDescription("Time from a handler's success to its delete's confirmation."),
				metric.WithExplicitBucketBoundaries(processBuckets...))
		default:
			inst, err = meter.Float64Histogram("sqsinbox.worker."+string(h)+".duration", metric.WithUnit("s"),
				metric.WithDescription(fmt.Sprintf("The worker's %s histogram.", h)))
		}
		if err != nil {
			return nil, fmt.Errorf("workerotel: histogram %s: %w", h, err)
		}
		m.histograms[h] = histogram{inst, []metric.RecordOption{metric.WithAttributeSet(s)}}
	}
	var err error
	m.inFlight, err = meter.Int64Gauge("sqsinbox.worker.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Handlers running now."))
	if err != nil {
		return nil, fmt.Errorf("workerotel: gauge in_flight: %w", err)
	}
	m.baseAttrs = base
	if err := m.observeGroups(meter); err != nil {
		return nil, err
	}
	return m, nil
}

// observeGroups registers the per-group gauges, observed from the worker's last report.
func (m *Metrics) observeGroups(meter metric.Meter) error {
	inFlight, err := meter.Int64ObservableGauge("sqsinbox.worker.group.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Messages of the group whose handlers run (the top groups by it, and \""+worker.OtherGroups+"\")."))
	if err != nil {
		return fmt.Errorf("workerotel: gauge group.in_flight: %w", err)
	}
	waiting, err := meter.Int64ObservableGauge("sqsinbox.worker.group.waiting", metric.WithUnit("{message}"),
		metric.WithDescription("Messages of the group received and waiting for a runner (Config.MaxPerGroup)."))
	if err != nil {
		return fmt.Errorf("workerotel: gauge group.waiting: %w", err)
	}
	oldest, err := meter.Float64ObservableGauge("sqsinbox.worker.group.oldest_wait", metric.WithUnit("s"),
		metric.WithDescription("How long the group's oldest waiting message has waited."))
	if err != nil {
		return fmt.Errorf("workerotel: gauge group.oldest_wait: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.groupsMu.Lock()
		defer m.groupsMu.Unlock()
		for _, g := range m.groups {
			set := metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), m.baseAttrs...), KeyGroupID.String(g.Group))...))
			o.ObserveInt64(inFlight, int64(g.InFlight), set)
			o.ObserveInt64(waiting, int64(g.Waiting), set)
			o.ObserveFloat64(oldest, g.OldestWait.Seconds(), set)
		}
		return nil
	}, inFlight, waiting, oldest)
	if err != nil {
		return fmt.Errorf("workerotel: group gauges: %w", err)
	}
	return nil
}

// SetGroups implements [worker.GroupMetrics].
func (m *Metrics) SetGroups(groups []worker.GroupStat) {
	m.groupsMu.Lock()
	m.groups = append(m.groups[:0], groups...)
	m.groupsMu.Unlock()
}

// bg is the context of the measurements: the calls of worker.Metrics carry none.
var bg = context.Background()

// Add implements [worker.Metrics].
func (m *Metrics) Add(c worker.Counter, n int) {
	if ct, ok := m.counters[c]; ok {
		ct.Add(bg, int64(n), ct.opts...)
	}
}

// Observe implements [worker.Metrics].
func (m *Metrics) Observe(h worker.Histogram, d time.Duration) {
	if ht, ok := m.histograms[h]; ok {
		ht.Record(bg, d.Seconds(), ht.opts...)
	}
}

// SetInFlight implements [worker.Metrics].
func (m *Metrics) SetInFlight(n int) { m.inFlight.Record(bg, int64(n), m.base...) }

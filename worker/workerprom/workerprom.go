// Package workerprom reports a [worker.Worker]'s measurements to Prometheus.
//
// Each [worker.Counter] becomes a counter named sqsinbox_worker_<name>_total, each
// [worker.Histogram] a histogram sqsinbox_worker_<name>_seconds, and the handlers in flight the
// gauge sqsinbox_worker_in_flight, all with a constant "queue" label.
//
// A worker with Config.MaxPerGroup on a standard queue (a fair queue) also reports its message
// groups ([worker.GroupMetrics]): the gauges sqsinbox_worker_group_in_flight,
// sqsinbox_worker_group_waiting and sqsinbox_worker_group_oldest_wait_seconds, with a "group"
// label for each of the top [worker.TopGroups] groups by in-flight messages and one for the rest
// ([worker.OtherGroups]), as of the worker's last report (every second). A group that leaves the
// top is no longer exported, so the series stay bounded however many tenants the queue has.
package workerprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Namespace prefixes every metric name.
const Namespace = "sqsinbox"

// Metrics implements [worker.Metrics] with Prometheus collectors.
type Metrics struct {
	counters   map[worker.Counter]prometheus.Counter
	histograms map[worker.Histogram]prometheus.Observer
	inFlight   prometheus.Gauge
	groups     *groupCollector
}

// groupCollector exports the groups of the worker's last report.
type groupCollector struct {
	inFlight, waiting, oldest *prometheus.Desc

	mu   sync.Mutex
	last []worker.GroupStat
}

// Describe implements prometheus.Collector.
func (g *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.inFlight
	ch <- g.waiting
	ch <- g.oldest
}

// Collect implements prometheus.Collector.
func (g *groupCollector) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.last {
		ch <- prometheus.MustNewConstMetric(g.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.Group)
		ch <- prometheus.MustNewConstMetric(g.waiting, prometheus.GaugeValue, float64(s.Waiting), s.Group)
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, s.OldestWait.Seconds(), s.Group)
	}
}

var help = map[worker.Counter]string{
	worker.Received:           "Messages received.",
	worker.Processed:          "Messages whose handler succeeded.",
	worker.Duplicates:         "Messages whose event was processed before (deleted without running).",
	worker.Failed:             "Handler errors, panics and timeouts.",
	worker.Retried:            "Messages handed back for a later delivery.",
	worker.LeasesLost:         "Messages whose lease was lost while they ran or waited.",
	worker.Blocked:            "Messages handed back because another consumer held their event's claim.",
	worker.Discarded:          "Messages deleted without effect because the handler said so.",
	worker.Released:           "Messages made visible again without being run.",
	worker.Deleted:            "Messages deleted from the queue.",
	worker.DeleteFailures:     "Deletes given up on (the message will be delivered again).",
	worker.Heartbeats:         "Visibility extensions of running handlers.",
	worker.ReceiveErrors:      "Failed ReceiveMessage calls.",
	worker.Batches:            "Calls of a batch handler.",
	worker.BatchedMessages:    "Messages given to batch handler calls (divided by batches: the mean batch size).",
	worker.RolledBack:         "Messages of a batch rolled back alone while the rest of the batch went on.",
	worker.BatchRetries:       "Batches rolled back as a whole and run again (deadlock, serialization failure).",
	worker.BrokenDeployments:  "Messages handed back because the deployment is broken (a missing table, column or grant); the worker pauses.",
	worker.PayloadsFetched:    "Offloaded payloads fetched before their handler.",
	worker.SQSRequests:        "SQS API calls the worker made (what SQS bills; divided by received: the requests a message costs).",
	worker.ReceiveRequests:    "ReceiveMessage calls.",
	worker.EmptyReceives:      "ReceiveMessage calls that returned no message.",
	worker.DeleteRequests:     "DeleteMessageBatch and DeleteMessage calls.",
	worker.VisibilityRequests: "ChangeMessageVisibility(Batch) calls: heartbeats, retry delays and releases.",
}

// New creates the collectors for the worker of queue and registers them with reg
// (prometheus.DefaultRegisterer if nil). It fails if they are registered already, for example
// by a second worker with the same queue label.
func New(reg prometheus.Registerer, queue string) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	labels := prometheus.Labels{"queue": queue}
	m := &Metrics{
		counters:   map[worker.Counter]prometheus.Counter{},
		histograms: map[worker.Histogram]prometheus.Observer{},
	}
	var cs []prometheus.Collector
	for _, c := range worker.Counters {
		pc := prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "worker", Name: string(c) + "_total",
			Help: help[c], ConstLabels: labels,
		})
		m.counters[c] = pc
		cs = append(cs, pc)
	}
	hh := map[worker.Histogram]string{
		worker.HandlerDuration: "Time each handler call took.",
		worker.CommitToDelete:  "Time from a handler's success to its delete's confirmation.",
		worker.HeldWait:        "Time from each message's receive to the start of its handler.",
	}
	for _, h := range worker.Histograms {
		ph := prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "worker", Name: string(h) + "_seconds",
			Help: hh[h], ConstLabels: labels,
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		})
		m.histograms[h] = ph
		cs = append(cs, ph)
	}
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "worker", Name: "in_flight",
		Help: "Handlers running now.", ConstLabels: labels,
	})
	cs = append(cs, m.inFlight)
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "worker", name), help, []string{"group"}, labels)
	}
	m.groups = &groupCollector{
		inFlight: desc("group_in_flight", "Messages of the group whose handlers run (the top groups by it, and \""+worker.OtherGroups+"\")."),
		waiting:  desc("group_waiting", "Messages of the group received and waiting for a runner (Config.MaxPerGroup)."),
		oldest:   desc("group_oldest_wait_seconds", "How long the group's oldest waiting message has waited."),
	}
	cs = append(cs, m.groups)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Add implements [worker.Metrics].
func (m *Metrics) Add(c worker.Counter, n int) {
	if pc, ok := m.counters[c]; ok {
		pc.Add(float64(n))
	}
}

// Observe implements [worker.Metrics].
func (m *Metrics) Observe(h worker.Histogram, d time.Duration) {
	if ph, ok := m.histograms[h]; ok {
		ph.Observe(d.Seconds())
	}
}

// SetInFlight implements [worker.Metrics].
func (m *Metrics) SetInFlight(n int) { m.inFlight.Set(float64(n)) }

// SetGroups implements [worker.GroupMetrics].
func (m *Metrics) SetGroups(groups []worker.GroupStat) {
	m.groups.mu.Lock()
	m.groups.last = append(m.groups.last[:0], groups...)
	m.groups.mu.Unlock()
}

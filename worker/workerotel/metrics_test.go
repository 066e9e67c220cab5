package workerotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// collect returns what reader holds, by instrument name.
func collect(t testing.TB, reader sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// TestMetrics: the worker's measurements, read back from the SDK, under the conventions' names
// where they have one, with the queue's attributes.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.WithoutCancel(t.Context())) })
	m, err := workerotel.NewMetrics(mp.Meter(workerotel.ScopeName), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var _ worker.Metrics = m
	m.Add(worker.Received, 10)
	m.Add(worker.Processed, 3)
	m.Add(worker.Duplicates, 1)
	m.Add(worker.Duplicates, 1)
	m.Add(worker.Counter("not_a_counter"), 1) // ignored, as in workerprom
	m.Observe(worker.HandlerDuration, 20*time.Millisecond)
	m.Observe(worker.HandlerDuration, 40*time.Millisecond)
	m.Observe(worker.CommitToDelete, 5*time.Millisecond)
	m.SetInFlight(7)
	m.SetInFlight(4)
	got := collect(t, reader)

	queue := attribute.NewSet(attribute.String("messaging.system", "aws_sqs"), attribute.String("messaging.destination.name", "orders"))
	with := func(op string) attribute.Set {
		return attribute.NewSet(attribute.String("messaging.system", "aws_sqs"), attribute.String("messaging.destination.name", "orders"),
			attribute.String("messaging.operation.name", op))
	}
	for name, want := range map[string]struct {
		n     int64
		attrs attribute.Set
	}{
		"messaging.client.consumed.messages": {10, with("receive")},
		"sqsinbox.worker.processed":          {3, queue},
		"sqsinbox.worker.duplicates":         {2, queue},
		"sqsinbox.worker.failed":             {0, queue},
	} {
		sum, ok := got[name].Data.(metricdata.Sum[int64])
		switch {
		case !ok && want.n == 0:
			continue // never added to: not exported
		case !ok:
			t.Errorf("%s: %T, want a sum", name, got[name].Data)
		case len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != want.n || !sum.DataPoints[0].Attributes.Equals(&want.attrs):
			t.Errorf("%s: %+v, want one point of %d with %v", name, sum.DataPoints, want.n, want.attrs.Encoded(attribute.DefaultEncoder()))
		case !sum.IsMonotonic:
			t.Errorf("%s is not monotonic", name)
		}
	}
	for name, want := range map[string]struct {
		count uint64
		sum   float64
		attrs attribute.Set
	}{
		"messaging.process.duration":                {2, 0.06, with("process")},
		"sqsinbox.worker.commit_to_delete.duration": {1, 0.005, queue},
	} {
		h, ok := got[name].Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 {
			t.Errorf("%s: %+v, want a histogram with one point", name, got[name].Data)
			continue
		}
		p := h.DataPoints[0]
		if p.Count != want.count || p.Sum < want.sum-1e-9 || p.Sum > want.sum+1e-9 || !p.Attributes.Equals(&want.attrs) {
			t.Errorf("%s: count %d sum %v %v, want %d, %v", name, p.Count, p.Sum, p.Attributes.Encoded(attribute.DefaultEncoder()), want.count, want.sum)
		}
		if got[name].Unit != "s" {
			t.Errorf("%s: unit %q, want s", name, got[name].Unit)
		}
	}
	g, ok := got["sqsinbox.worker.in_flight"].Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 4 {
		t.Errorf("in_flight: %+v, want the last value, 4", got["sqsinbox.worker.in_flight"].Data)
	}
}

// TestMetricsEveryCounter: every counter the worker has gets an instrument (a counter added to
// the worker later too).
func TestMetricsEveryCounter(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.WithoutCancel(t.Context())) })
	m, err := workerotel.NewMetrics(mp.Meter(workerotel.ScopeName), "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range worker.Counters {
		m.Add(c, 1)
	}
	got := collect(t, reader)
	for _, c := range worker.Counters {
		name := "sqsinbox.worker." + string(c)
		if c == worker.Received {
			name = "messaging.client.consumed.messages"
		}
		if _, ok := got[name]; !ok {
			t.Errorf("counter %s: no %s recorded", c, name)
		}
	}
}

// TestGroupMetrics: the groups of the worker's last report are observed with the group id, and a
// group missing from the next report is no longer.
func TestGroupMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.WithoutCancel(t.Context())) })
	m, err := workerotel.NewMetrics(mp.Meter(workerotel.ScopeName), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var _ worker.GroupMetrics = m
	m.SetGroups([]worker.GroupStat{{Group: "tenant-a", InFlight: 4, Waiting: 30, OldestWait: 1500 * time.Millisecond},
		{Group: worker.OtherGroups, InFlight: 1}})
	got := collect(t, reader)
	points := func(name string) map[string]int64 {
		out := map[string]int64{}
		g, ok := got[name].Data.(metricdata.Gauge[int64])
		if !ok {
			t.Fatalf("%s: %T, want an int64 gauge", name, got[name].Data)
		}
		for _, p := range g.DataPoints {
			v, _ := p.Attributes.Value(workerotel.KeyGroupID)
			out[v.AsString()] = p.Value
		}
		return out
	}
	if p := points("sqsinbox.worker.group.in_flight"); p["tenant-a"] != 4 || p[worker.OtherGroups] != 1 || len(p) != 2 {
		t.Errorf("group.in_flight %v", p)
	}
	if p := points("sqsinbox.worker.group.waiting"); p["tenant-a"] != 30 {
		t.Errorf("group.waiting %v", p)
	}
	m.SetGroups([]worker.GroupStat{{Group: "tenant-b", InFlight: 2}})
	got = collect(t, reader)
	if p := points("sqsinbox.worker.group.in_flight"); p["tenant-b"] != 2 || len(p) != 1 {
		t.Errorf("group.in_flight after a report of one group: %v", p)
	}
}

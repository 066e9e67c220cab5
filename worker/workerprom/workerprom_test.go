package workerprom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerprom"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := workerprom.New(reg, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var _ worker.Metrics = m
	m.Add(worker.Processed, 3)
	m.Add(worker.Duplicates, 1)
	m.Observe(worker.HandlerDuration, 20*time.Millisecond)
	m.SetInFlight(7)
	want := `
# HELP sqsinbox_worker_processed_total Messages whose handler succeeded.
# TYPE sqsinbox_worker_processed_total counter
sqsinbox_worker_processed_total{queue="orders"} 3
# HELP sqsinbox_worker_duplicates_total Messages whose event was processed before (deleted without running).
# TYPE sqsinbox_worker_duplicates_total counter
sqsinbox_worker_duplicates_total{queue="orders"} 1
# HELP sqsinbox_worker_in_flight Handlers running now.
# TYPE sqsinbox_worker_in_flight gauge
sqsinbox_worker_in_flight{queue="orders"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sqsinbox_worker_processed_total", "sqsinbox_worker_duplicates_total", "sqsinbox_worker_in_flight"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "sqsinbox_worker_handler_duration_seconds"); n != 1 {
		t.Errorf("handler_duration series = %d", n)
	}
	if _, err := workerprom.New(reg, "orders"); err == nil {
		t.Error("a second registration for the same queue succeeded")
	}
}

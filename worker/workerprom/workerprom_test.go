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

// TestGroupMetrics: the groups of the worker's last report are exported with a group label, and
// a group missing from the next report is no longer.
func TestGroupMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := workerprom.New(reg, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var _ worker.GroupMetrics = m
	m.SetGroups([]worker.GroupStat{{Group: "tenant-a", InFlight: 4, Runners: 2, Waiting: 30, OldestWait: 1500 * time.Millisecond},
		{Group: worker.OtherGroups, InFlight: 1, Runners: 1}})
	want := `
# HELP sqsinbox_worker_group_in_flight Messages of the group whose handlers run (the top groups by it, and "other groups").
# TYPE sqsinbox_worker_group_in_flight gauge
sqsinbox_worker_group_in_flight{group="other groups",queue="orders"} 1
sqsinbox_worker_group_in_flight{group="tenant-a",queue="orders"} 4
# HELP sqsinbox_worker_group_oldest_wait_seconds How long the group's oldest waiting message has waited.
# TYPE sqsinbox_worker_group_oldest_wait_seconds gauge
sqsinbox_worker_group_oldest_wait_seconds{group="other groups",queue="orders"} 0
sqsinbox_worker_group_oldest_wait_seconds{group="tenant-a",queue="orders"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sqsinbox_worker_group_in_flight", "sqsinbox_worker_group_oldest_wait_seconds"); err != nil {
		t.Error(err)
	}
	m.SetGroups([]worker.GroupStat{{Group: "tenant-b", InFlight: 2}})
	if n := testutil.CollectAndCount(reg, "sqsinbox_worker_group_waiting"); n != 1 {
		t.Errorf("group_waiting series = %d after a report of one group; want 1", n)
	}
}

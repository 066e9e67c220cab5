package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// envChildArgs, when set, makes this test binary the sqsinbox command with those arguments (a
// JSON array): a real process, for a test to SIGKILL.
const envChildArgs = "SQSINBOX_TEST_CLI_ARGS"

func init() {
	if a := os.Getenv(envChildArgs); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			fmt.Fprintln(os.Stderr, envChildArgs+":", err)
			os.Exit(2)
		}
		os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
	}
}

// TestRedriveKilledAndResumed (the pass's SQS server, PostgreSQL, the CLI as a real process): a
// redrive --handler of 150 DLQ messages (100 never applied, 50 already applied by the handler) is
// SIGKILLed part-way, then run again to the end. Nothing is lost: the DLQ ends empty and every
// never-applied event is in the source queue at least once (a copy made just before the kill,
// whose DLQ original was not yet deleted, is sent again: a duplicate); no applied one is moved.
// Nothing is applied twice: a worker with the inbox drains the source queue and each event's
// effect happens once, the duplicates found in the inbox.
func TestRedriveKilledAndResumed(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdkill")
	schema := dbArgs[len(dbArgs)-1]
	ctx := t.Context()
	const handler, never, applied = "warehouse", 100, 50
	for i := range applied {
		if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ($1, $2)`,
			handler, fmt.Sprint("applied_", i)); err != nil {
			t.Fatal(err)
		}
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdkill", MaxReceiveCount: 3})
	var msgs []sqstest.Message
	for i := range never {
		msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":"never_%d"}`, i), Attributes: map[string]string{"event_id": fmt.Sprint("never_", i)}})
		if i < applied {
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":"applied_%d"}`, i), Attributes: map[string]string{"event_id": fmt.Sprint("applied_", i)}})
		}
	}
	if err := sqstest.Send(ctx, srv.Client(), q.DLQURL, msgs); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--handler", handler}, dbArgs...)

	// The first run, paced to 25 messages a second, is killed once 30 copies are in the queue.
	js, _ := json.Marshal(append(args, "--rate", "25"))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildArgs+"="+string(js))
	var out sqstest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sqstest.WaitFor(t, 60*time.Second, "30 messages moved", func() (bool, string) {
		n, err := sqstest.Count(ctx, srv.Client(), q.URL)
		if err != nil {
			return false, err.Error()
		}
		select {
		case err := <-exited:
			t.Fatalf("the redrive ended before it was killed (%v):\n%s", err, out.String())
		default:
		}
		return n >= 30, fmt.Sprint(n, " moved")
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the redrive's exit: %v; want killed", err)
	}
	if strings.Contains(out.String(), "moved 1") {
		t.Fatalf("the redrive finished before the kill:\n%s", out.String())
	}

	// Run again; messages the killed run held are visible again after the DLQ's visibility
	// timeout (30 s), so the resumed run ends once it has seen them all.
	r := cli(t, "", args...).mustOK(t)
	t.Logf("resumed run:\n%s", r.stdout)
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 0, 90*time.Second)

	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	effects := map[string]int{}
	h, err := inboxhandler.New(ib, handler, inboxhandler.DefaultKey, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		key, _ := m.Attribute("event_id")
		effects[key]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	met := &deliveryCounts{}
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: h, Metrics: met})
	sqstest.WaitCount(t, srv.Client(), q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)
	mu.Lock()
	defer mu.Unlock()
	for i := range never {
		if n := effects[fmt.Sprint("never_", i)]; n != 1 {
			t.Errorf("never_%d applied %d times; want once", i, n)
		}
	}
	for i := range applied {
		if n := effects[fmt.Sprint("applied_", i)]; n != 0 {
			t.Errorf("applied_%d, applied before the redrive, was moved and ran again (%d)", i, n)
		}
	}
	t.Logf("the worker found %d duplicate copies in the inbox", met.get(worker.Duplicates))
}

// deliveryCounts counts the worker's counters.
type deliveryCounts struct {
	mu sync.Mutex
	c  map[worker.Counter]int
}

func (m *deliveryCounts) Add(c worker.Counter, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c == nil {
		m.c = map[worker.Counter]int{}
	}
	m.c[c] += n
}
func (m *deliveryCounts) Observe(worker.Histogram, time.Duration) {}
func (m *deliveryCounts) SetInFlight(int)                         {}
func (m *deliveryCounts) get(c worker.Counter) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c[c]
}

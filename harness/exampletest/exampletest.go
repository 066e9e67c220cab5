// Package exampletest runs the examples' integration tests against real servers: a PostgreSQL
// database from pgtest (a throwaway cluster, or TEST_DATABASE_URL) and an SQS server from sqstest
// (GoAws v0.5.4 built from the module proxy, or AWS_ENDPOINT_URL_SQS).
package exampletest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// Servers are the servers of one test binary.
type Servers struct {
	DB  *pgtest.Server
	SQS *sqstest.Server
}

// Main starts both servers, runs the tests and stops the servers. When a server cannot be had it
// prints why and exits 1: the tests fail, they never skip.
func Main(m *testing.M, prefix string, out *Servers) { MainWith(m, prefix, &out.DB, &out.SQS) }

// MainWith is Main for a test package that keeps the two servers in variables of its own. Both
// are set before the tests run; after them, no goroutine the tests started may be left behind
// (idle keep-alive connections aside).
func MainWith(m *testing.M, prefix string, db **pgtest.Server, sqs **sqstest.Server) {
	ctx := context.Background()
	var err error
	if *db, err = pgtest.Start(ctx, prefix); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *sqs, err = sqstest.Start(ctx); err != nil {
		(*db).Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The goroutines running now (the harness's own) are not the tests'. IgnoreCurrent must be
	// taken here: taken after the tests, it would ignore whatever they left behind.
	before := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := sqstest.FindLeaks(before); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	(*sqs).Close()
	(*db).Close()
	os.Exit(code)
}

// Pool returns a pool on the test database, closed when t ends.
func (s Servers) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Queue creates a uniquely named queue with a DLQ (maxReceiveCount 5).
func (s Servers) Queue(t testing.TB, prefix string) *sqstest.Queue {
	t.Helper()
	return s.SQS.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 5})
}

// Getenv returns the environment an example sees: DATABASE_URL and QUEUE_URL, plus extra
// ("KEY=value"), and the process's own for the rest (the AWS chain).
func (s Servers) Getenv(queueURL string, extra ...string) func(string) string {
	env := map[string]string{"DATABASE_URL": s.DB.URL, "QUEUE_URL": queueURL}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// SetPGEnv unsets DATABASE_URL and sets the libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGPASSWORD, PGSSLMODE) of the postgres:// URL dbURL in the process's environment, where the
// driver reads them, until t ends. t must not be parallel.
func SetPGEnv(t *testing.T, dbURL string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	for k, v := range map[string]string{
		"DATABASE_URL": "", "PGHOST": u.Hostname(), "PGPORT": u.Port(), "PGDATABASE": strings.TrimPrefix(u.Path, "/"),
		"PGUSER": u.User.Username(), "PGPASSWORD": pw, "PGSSLMODE": u.Query().Get("sslmode"),
	} {
		t.Setenv(k, v)
	}
}

// Migrate runs `<example> migrate`.
func (s Servers) Migrate(t testing.TB, spec workerapp.Spec) {
	t.Helper()
	err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"migrate"}, Getenv: s.Getenv(""), Logger: Logger(t)})
	if err != nil {
		t.Fatalf("%s migrate: %v", spec.Name, err)
	}
}

// Running is an example running in the test's process.
type Running struct {
	Worker  *worker.Worker
	Metrics *Metrics
	cancel  context.CancelFunc
	done    chan error
}

// Start runs the example (as its main would, without a subcommand) on queueURL until Stop or the
// end of the test. The worker long-polls for 1 s so that it stops quickly.
func (s Servers) Start(t testing.TB, spec workerapp.Spec, queueURL string, o workerapp.Options) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	r := &Running{Metrics: NewMetrics(), cancel: cancel, done: make(chan error, 1)}
	started := make(chan *worker.Worker, 1)
	if o.Getenv == nil {
		o.Getenv = s.Getenv(queueURL)
	}
	if o.Logger == nil {
		o.Logger = Logger(t)
	}
	if o.Worker.WaitTime == 0 {
		o.Worker.WaitTime = time.Second
	}
	if o.Worker.Metrics == nil {
		o.Worker.Metrics = r.Metrics
	}
	o.Started = func(w *worker.Worker) { started <- w }
	go func() { r.done <- workerapp.Run(ctx, spec, o) }()
	select {
	case r.Worker = <-started:
	case err := <-r.done:
		cancel()
		t.Fatalf("%s did not start: %v", spec.Name, err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("%s did not start within a minute", spec.Name)
	}
	t.Cleanup(func() { r.Stop(t) })
	t.Cleanup(func() {
		// Runs first: a test that failed while the worker ran says what the worker held then.
		if t.Failed() && r.cancel != nil {
			st, _ := json.Marshal(r.Worker.State())
			t.Logf("%s at the failure: state %s; counters %v", spec.Name, st, r.Metrics.All())
		}
	})
	return r
}

// Stop stops the example as SIGTERM does and fails t if it does not stop cleanly within
// workerapp.StopTimeout + workerapp.HardStopTimeout.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("stop: %v", err)
		}
	case <-time.After(workerapp.StopTimeout + workerapp.HardStopTimeout):
		t.Errorf("the example did not stop within %v", workerapp.StopTimeout+workerapp.HardStopTimeout)
	}
}

// Event is one OrderPaid event and how many times it is sent.
type Event struct {
	ID, OrderID, CustomerID string
	Amount                  int64
	Times                   int
}

// Body returns the event's JSON body.
func (e Event) Body() string {
	b, _ := json.Marshal(map[string]any{"id": e.ID, "order_id": e.OrderID, "customer_id": e.CustomerID,
		"amount": e.Amount, "currency": "EUR"})
	return string(b)
}

// Events returns n OrderPaid events for distinct orders, spread over customers customers. A
// fifth of them are sent two to five times.
func Events(prefix string, n, customers int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{
			ID:         fmt.Sprintf("evt_%s_%d", prefix, i),
			OrderID:    fmt.Sprintf("ord_%s_%d", prefix, i),
			CustomerID: "cus_" + strconv.Itoa(i%customers),
			Amount:     int64(1000 + i),
			Times:      1,
		}
		if i%5 == 0 {
			out[i].Times = 2 + i/5%4
		}
	}
	return out
}

// Messages returns every delivery of events, shuffled. Every other message carries the event id
// in the event_id attribute too, as a producer that sets it would.
func Messages(events []Event) []sqstest.Message {
	var msgs []sqstest.Message
	for _, e := range events {
		for j := range e.Times {
			m := sqstest.Message{Body: e.Body()}
			if (len(msgs)+j)%2 == 0 {
				m.Attributes = map[string]string{"event_id": e.ID}
			}
			msgs = append(msgs, m)
		}
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// Send sends msgs to the queue.
func (s Servers) Send(t testing.TB, queueURL string, msgs []sqstest.Message) {
	t.Helper()
	if err := sqstest.Send(t.Context(), s.SQS.Client(), queueURL, msgs); err != nil {
		t.Fatal(err)
	}
}

// WaitDrained waits until the queue holds no message, visible or in flight.
func (s Servers) WaitDrained(t testing.TB, queueURL string, timeout time.Duration) {
	t.Helper()
	sqstest.WaitFor(t, timeout, "the queue to drain", func() (bool, string) {
		n, err := sqstest.Count(t.Context(), s.SQS.Client(), queueURL)
		if err != nil {
			return false, err.Error()
		}
		return n == 0, fmt.Sprintf("%d messages left", n)
	})
}

// Metrics counts the worker's counters.
type Metrics struct {
	mu sync.Mutex
	c  map[worker.Counter]int
}

// NewMetrics returns empty counters.
func NewMetrics() *Metrics { return &Metrics{c: map[worker.Counter]int{}} }

// Add implements worker.Metrics.
func (m *Metrics) Add(c worker.Counter, n int) {
	m.mu.Lock()
	m.c[c] += n
	m.mu.Unlock()
}

// Observe implements worker.Metrics.
func (m *Metrics) Observe(worker.Histogram, time.Duration) {}

// SetInFlight implements worker.Metrics.
func (m *Metrics) SetInFlight(int) {}

// All returns a copy of every counter.
func (m *Metrics) All() map[worker.Counter]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.c)
}

// Get returns counter c.
func (m *Metrics) Get(c worker.Counter) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c[c]
}

// Logger logs warnings and errors to t, and nothing after t ends (workertest.Logger).
func Logger(t testing.TB) *slog.Logger { return workertest.Logger(t) }

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// srv is the real SQS server of this pass: GoAws or fauxqs started by sqstest, or the server
// AWS_ENDPOINT_URL_SQS names. The behaviour tests run on it and on the in-process fake
// (suite_test.go).
var srv *sqstest.Server

func TestMain(m *testing.M) {
	s, err := sqstest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := sqstest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	s.Close()
	os.Exit(code)
}

func newClient(t testing.TB) *sqs.Client {
	t.Helper()
	c, err := srv.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recorder counts handler calls per message body.
type recorder struct {
	mu    sync.Mutex
	calls map[string]int
	total int
}

func newRecorder() *recorder { return &recorder{calls: map[string]int{}} }

func (r *recorder) add(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[body]++
	r.total++
	return r.calls[body]
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) count(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[body]
}

func (r *recorder) dupes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total - len(r.calls)
}

func bodies(n int, prefix string) []sqstest.Message {
	out := make([]sqstest.Message, n)
	for i := range out {
		out[i] = sqstest.Message{Body: prefix + strconv.Itoa(i)}
	}
	return out
}

// testMetrics counts the worker's counters.
type testMetrics struct {
	mu sync.Mutex
	c  map[worker.Counter]int
}

func newTestMetrics() *testMetrics { return &testMetrics{c: map[worker.Counter]int{}} }

func (m *testMetrics) Add(c worker.Counter, n int) {
	m.mu.Lock()
	m.c[c] += n
	m.mu.Unlock()
}
func (m *testMetrics) Observe(worker.Histogram, time.Duration) {}
func (m *testMetrics) SetInFlight(int)                         {}
func (m *testMetrics) get(c worker.Counter) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c[c]
}

type httpClientWithTimeout struct{ d time.Duration }

func (c *httpClientWithTimeout) Do(*http.Request) (*http.Response, error) {
	return nil, errors.New("not used")
}
func (c *httpClientWithTimeout) GetTimeout() time.Duration { return c.d }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/examples/payments/provider"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// TestSIGKILLAfterCharge runs the built binary, and kills it with SIGKILL right after the
// provider charged the first event, before the binary's handler has the answer (so before its
// local commit). A second run of the binary gets the events again (after the queue's 2 s
// visibility timeout), sends the same Idempotency-Keys, and the provider replays: one charge per
// event. The second run is then stopped with SIGTERM and must exit 0.
func TestSIGKILLAfterCharge(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv.Migrate(t, newSpec(nil))
	pool := srv.Pool(t)
	q := srv.SQS.CreateQueue(t, sqstest.QueueOptions{Prefix: "payments", VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 5})
	prov, err := provider.Start(pool, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)

	// The binary calls the provider through this proxy, which kills the binary once the provider
	// has answered the first charge.
	var (
		mu      sync.Mutex
		child   *proc
		killed  bool
		charged int
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, prov.URL+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		mu.Lock()
		charged++
		if !killed && resp.StatusCode == http.StatusOK {
			killed = true
			child.kill(t) // the charge is made; the binary dies before it hears of it
			mu.Unlock()
			http.Error(w, "killed", http.StatusBadGateway)
			return
		}
		mu.Unlock()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(rb)
	}))
	t.Cleanup(proxy.Close)

	env := append(os.Environ(), "DATABASE_URL="+srv.DB.URL, "QUEUE_URL="+q.URL, "PROVIDER_URL="+proxy.URL, "LOG_LEVEL=warn")
	mu.Lock()
	child = start(t, bin, env)
	mu.Unlock()

	var msgs []sqstest.Message
	ids := []string{}
	for i := range 5 {
		body := fmt.Sprintf(`{"id":"evt_kill_%d","order_id":"ord_kill_%d","customer_id":"cus_1","amount":%d,"currency":"EUR"}`, i, i, 1000+i)
		msgs = append(msgs, sqstest.Message{Body: body}, sqstest.Message{Body: body, Attributes: map[string]string{"event_id": fmt.Sprintf("evt_kill_%d", i)}})
		ids = append(ids, fmt.Sprintf("ord_kill_%d", i))
	}
	srv.Send(t, q.URL, msgs)
	sqstest.WaitFor(t, 30*time.Second, "the binary killed after a charge", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return killed && child.exited(), "not yet"
	})

	second := start(t, bin, env)
	srv.WaitDrained(t, q.URL, 45*time.Second)
	sqstest.WaitFor(t, 15*time.Second, "every order charged and recorded", func() (bool, string) {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM payments.charges WHERE order_id = ANY($1)`, ids).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n >= len(ids), fmt.Sprintf("%d recorded", n)
	})
	second.term(t)

	checkOrders(t, ids)
	mu.Lock()
	if charged <= len(ids) {
		t.Errorf("the provider was called %d times for %d events; the kill should have caused a retry", charged, len(ids))
	}
	mu.Unlock()
}

// proc is a running example binary.
type proc struct {
	cmd     *exec.Cmd
	out     *sqstest.Buffer
	done    chan struct{}
	waitErr error
}

func start(t *testing.T, bin string, env []string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin), out: &sqstest.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", bin, p.out.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) kill(t *testing.T) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Error("the binary did not die of SIGKILL within 10 s")
	}
}

// term sends SIGTERM and checks a clean exit within ECS's 30 s stop timeout.
func (p *proc) term(t *testing.T) {
	t.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.waitErr != nil {
			t.Errorf("after SIGTERM the binary exited with %v\n%s", p.waitErr, p.out.String())
		}
		t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Errorf("the binary did not exit within 30 s of SIGTERM")
	}
}

package reliability

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// SQSProxy is an HTTP proxy in front of an SQS server (its JSON protocol) that injects faults,
// counts calls per operation and second, follows the messages that pass through it, and times a
// test's kills.
//   - Faulty: each request is refused, before it reaches the server, with probability Throttle
//     by a 400 ThrottlingException and with probability Errors by a 503.
//   - Down: the server is unreachable: every open connection is reset (long polls in flight
//     included) and new connections are closed as soon as they are accepted (counted as
//     "refused").
//   - Traffic: what SendMessageBatch stored, per event id; the deliveries ReceiveMessage
//     returned, per MessageId; the messages deleted; and the deliveries received and not yet
//     deleted ([SQSProxy.Traffic], [SQSProxy.Unsettled]).
//   - Traps: a trap armed at a [TrapPoint] springs at the next call that reaches it and, at
//     some points, holds that call until the test, having killed its caller, releases it
//     ([SQSProxy.Arm]).
type SQSProxy struct {
	ln      *faultListener
	srv     *http.Server
	rp      *httputil.ReverseProxy
	calls   *CallCounter
	closing chan struct{}
	closed  sync.Once

	mu       sync.Mutex
	throttle float64
	errs     float64
	conns    map[net.Conn]bool

	tmu       sync.Mutex // the traffic and the trap
	trap      *Trap
	published map[string]int
	received  map[string]int
	unsettled map[string]bool // receipt handles
	deleted   int
}

// TrapPoint is where in an SQS call a trap springs.
type TrapPoint string

const (
	// AfterPublish springs once the server answered a SendMessageBatch (it stored the entries
	// its answer lists), and holds the answer until the trap is released, then fails the call
	// (502). The caller (a relay) has not marked those rows sent: its successor publishes them
	// again.
	AfterPublish TrapPoint = "publish"
	// AfterReceive springs when a ReceiveMessage returns messages; the answer passes at once.
	AfterReceive TrapPoint = "receive"
	// BeforeDelete springs when a DeleteMessage or DeleteMessageBatch arrives, and holds it
	// before it reaches the server until the trap is released, then fails it (502). The caller
	// (a worker) has committed its messages: they come back, and its inbox absorbs them.
	BeforeDelete TrapPoint = "delete"
)

// Trap is a trap armed on an [SQSProxy]. The test waits for it to spring (Hit, or
// [SQSProxy.Await]), kills the caller, then releases the call it holds.
type Trap struct {
	At      TrapPoint
	when    func() bool
	hit     chan struct{}
	release chan struct{}
	once    sync.Once
}

// Hit is closed when the trap springs.
func (t *Trap) Hit() <-chan struct{} { return t.hit }

// Release lets the call the trap holds go on (it fails). It may be called more than once.
func (t *Trap) Release() { t.once.Do(func() { close(t.release) }) }

// Traffic is what went through an [SQSProxy].
type Traffic struct {
	// Published counts, per event id (the [outbox.EventIDAttribute] message attribute; "" for
	// a message without it), the copies SendMessageBatch stored.
	Published map[string]int
	// Received counts the deliveries ReceiveMessage returned, per MessageId.
	Received map[string]int
	// Deleted is the number of messages deleted.
	Deleted int
}

// PublishedCopies is the number of messages SendMessageBatch stored.
func (t Traffic) PublishedCopies() int { return sumValues(t.Published) }

// Deliveries is the number of messages ReceiveMessage returned.
func (t Traffic) Deliveries() int { return sumValues(t.Received) }

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// errTrapped fails a call whose trap held it: its caller was killed meanwhile.
var errTrapped = errors.New("reliability: the call was held by a trap and its caller killed")

// NewSQSProxy starts a proxy to the server at endpoint.
func NewSQSProxy(endpoint string) (*SQSProxy, error) {
	target, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &SQSProxy{calls: NewCallCounter(), conns: map[net.Conn]bool{}, closing: make(chan struct{}),
		published: map[string]int{}, received: map[string]int{}, unsettled: map[string]bool{}}
	p.ln = &faultListener{Listener: ln, p: p}
	p.rp = httputil.NewSingleHostReverseProxy(target)
	p.rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	p.rp.ModifyResponse = p.response
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = true
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		}}
	go func() { _ = p.srv.Serve(p.ln) }()
	return p, nil
}

// Endpoint is the proxy's base URL.
func (p *SQSProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Calls returns the call counter (operation names as in X-Amz-Target, and "refused").
func (p *SQSProxy) Calls() *CallCounter { return p.calls }

// SetFaults sets the probabilities of throttling and 5xx answers (0, 0: none).
func (p *SQSProxy) SetFaults(throttle, errs float64) {
	p.mu.Lock()
	p.throttle, p.errs = throttle, errs
	p.mu.Unlock()
}

// SetDown makes the server unreachable (true) or reachable again.
func (p *SQSProxy) SetDown(down bool) {
	p.ln.down.Store(down)
	if !down {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, not a graceful close
		}
		_ = c.Close()
	}
	p.rp.Transport.(*http.Transport).CloseIdleConnections()
}

// Close stops the proxy, failing the calls traps still hold.
func (p *SQSProxy) Close() {
	p.closed.Do(func() { close(p.closing) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	p.rp.Transport.(*http.Transport).CloseIdleConnections()
}

// Arm sets a trap at the point at, replacing any trap not yet sprung. It springs only while
// when (called under the proxy's lock: it must be quick) returns true.
func (p *SQSProxy) Arm(at TrapPoint, when func() bool) *Trap {
	t := &Trap{At: at, when: when, hit: make(chan struct{}), release: make(chan struct{})}
	p.tmu.Lock()
	p.trap = t
	p.tmu.Unlock()
	return t
}

// Disarm removes t if it has not sprung, and reports whether it did that.
func (p *SQSProxy) Disarm(t *Trap) bool {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.trap == t {
		p.trap = nil
		return true
	}
	return false
}

// Await waits up to timeout for t to spring. If it has not, t is disarmed and Await returns
// false.
func (p *SQSProxy) Await(t *Trap, timeout time.Duration) bool {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-t.hit:
		return true
	case <-tm.C:
		if p.Disarm(t) {
			return false
		}
		<-t.hit // it sprang as the time ran out
		return true
	}
}

// spring fires the armed trap if it is set at at and its condition holds.
func (p *SQSProxy) spring(at TrapPoint) *Trap {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	t := p.trap
	if t == nil || t.At != at || !t.when() {
		return nil
	}
	p.trap = nil
	close(t.hit)
	return t
}

// hold waits until t is released or the proxy closes.
func (p *SQSProxy) hold(t *Trap) {
	select {
	case <-t.release:
	case <-p.closing:
	}
}

// Traffic returns a copy of what went through the proxy so far.
func (p *SQSProxy) Traffic() Traffic {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	t := Traffic{Published: make(map[string]int, len(p.published)), Received: make(map[string]int, len(p.received)), Deleted: p.deleted}
	for k, v := range p.published {
		t.Published[k] = v
	}
	for k, v := range p.received {
		t.Received[k] = v
	}
	return t
}

// Unsettled is the number of deliveries received and not deleted.
func (p *SQSProxy) Unsettled() int {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	return len(p.unsettled)
}

// ForgetUnsettled drops every delivery received and not deleted from the count: those of a
// consumer that was killed, which come back after their visibility timeout.
func (p *SQSProxy) ForgetUnsettled() {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	clear(p.unsettled)
}

// proxyCall is what the response handler needs of the request: its operation and body.
type proxyCall struct {
	op   string
	body []byte
}

type proxyCallKey struct{}

func (p *SQSProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if op == "" {
		op = "other"
	}
	p.calls.Add(op)
	p.mu.Lock()
	throttle, errs := p.throttle, p.errs
	p.mu.Unlock()
	x := rand.Float64()
	switch {
	case x < throttle:
		writeAPIError(w, http.StatusBadRequest, "ThrottlingException", "Rate exceeded")
		return
	case x < throttle+errs:
		writeAPIError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Service Unavailable")
		return
	}
	switch op {
	case "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch":
	default:
		p.rp.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if op == "DeleteMessage" || op == "DeleteMessageBatch" {
		if t := p.spring(BeforeDelete); t != nil {
			p.hold(t)
			w.WriteHeader(http.StatusBadGateway)
			return
		}
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyCallKey{}, &proxyCall{op: op, body: body})))
}

// response follows the messages of a successful call and springs the traps after the server.
func (p *SQSProxy) response(res *http.Response) error {
	call, _ := res.Request.Context().Value(proxyCallKey{}).(*proxyCall)
	if call == nil || res.StatusCode != http.StatusOK {
		return nil
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewReader(b))
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if b, err = io.ReadAll(zr); err != nil {
			return err
		}
	}
	switch call.op {
	case "SendMessageBatch":
		var in struct {
			Entries []struct {
				Id                string
				MessageAttributes map[string]struct{ StringValue string }
			}
		}
		var out struct{ Successful []struct{ Id string } }
		_ = json.Unmarshal(call.body, &in)
		_ = json.Unmarshal(b, &out)
		p.tmu.Lock()
		for _, s := range out.Successful {
			for _, e := range in.Entries {
				if e.Id == s.Id {
					p.published[e.MessageAttributes[outbox.EventIDAttribute].StringValue]++
				}
			}
		}
		p.tmu.Unlock()
		if t := p.spring(AfterPublish); t != nil {
			p.hold(t)
			return errTrapped
		}
	case "ReceiveMessage":
		var out struct {
			Messages []struct{ MessageId, ReceiptHandle string }
		}
		_ = json.Unmarshal(b, &out)
		p.tmu.Lock()
		for _, m := range out.Messages {
			p.received[m.MessageId]++
			p.unsettled[m.ReceiptHandle] = true
		}
		p.tmu.Unlock()
		if len(out.Messages) > 0 {
			p.spring(AfterReceive)
		}
	case "DeleteMessage":
		var in struct{ ReceiptHandle string }
		_ = json.Unmarshal(call.body, &in)
		p.tmu.Lock()
		p.deleted++
		delete(p.unsettled, in.ReceiptHandle)
		p.tmu.Unlock()
	case "DeleteMessageBatch":
		var in struct {
			Entries []struct{ Id, ReceiptHandle string }
		}
		var out struct{ Successful []struct{ Id string } }
		_ = json.Unmarshal(call.body, &in)
		_ = json.Unmarshal(b, &out)
		p.tmu.Lock()
		for _, s := range out.Successful {
			for _, e := range in.Entries {
				if e.Id == s.Id {
					p.deleted++
					delete(p.unsettled, e.ReceiptHandle)
				}
			}
		}
		p.tmu.Unlock()
	}
	return nil
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", code+";Sender")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#` + code + `","message":"` + msg + `"}`))
}

type faultListener struct {
	net.Listener
	p    *SQSProxy
	down atomic.Bool
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.down.Load() {
			return c, nil
		}
		l.p.calls.Add("refused")
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

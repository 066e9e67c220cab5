package reliability

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SQSProxy is an HTTP proxy in front of an SQS server that injects faults and counts calls per
// operation and second.
//   - Faulty: each request is refused, before it reaches the server, with probability Throttle
//     by a 400 ThrottlingException and with probability Errors by a 503.
//   - Down: the server is unreachable: every open connection is reset (long polls in flight
//     included) and new connections are closed as soon as they are accepted (counted as
//     "refused").
type SQSProxy struct {
	ln    *faultListener
	srv   *http.Server
	rp    *httputil.ReverseProxy
	calls *CallCounter

	mu       sync.Mutex
	throttle float64
	errs     float64
	conns    map[net.Conn]bool
}

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
	p := &SQSProxy{calls: NewCallCounter(), conns: map[net.Conn]bool{}}
	p.ln = &faultListener{Listener: ln, p: p}
	p.rp = httputil.NewSingleHostReverseProxy(target)
	p.rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
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

// Close stops the proxy.
func (p *SQSProxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	p.rp.Transport.(*http.Transport).CloseIdleConnections()
}

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
	p.rp.ServeHTTP(w, r)
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

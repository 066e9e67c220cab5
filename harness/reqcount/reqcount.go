// Package reqcount counts the requests an AWS SDK client sends, by API action, for the benches
// that report what a message costs in requests (SQS bills each request). It is an HTTP client
// (the SDK's HTTPClient option) that counts every attempt it is given, retries included, by the
// action in its X-Amz-Target header (the JSON protocol's "AmazonSQS.ReceiveMessage"), and counts
// the ReceiveMessage responses that held no message.
package reqcount

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Doer is an HTTP client as the AWS SDK's clients take it (their HTTPClient option).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client is a Doer that counts the requests it passes to the Doer it wraps.
type Client struct {
	next  Doer
	mu    sync.Mutex
	by    map[string]*atomic.Int64
	empty atomic.Int64
}

// New returns a Client that sends through next (http.DefaultClient when nil).
func New(next Doer) *Client {
	if next == nil {
		next = http.DefaultClient
	}
	return &Client{next: next, by: map[string]*atomic.Int64{}}
}

// NewTransport returns a Client over an http.Client of its own that keeps idle idle connections
// per host (the SDK's default keeps 10; a worker with many pollers needs more).
func NewTransport(idle int) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = max(t.MaxIdleConns, idle), idle
	return New(&http.Client{Transport: t})
}

// Do counts req by its action and sends it; a ReceiveMessage answer is read whole, to tell an
// empty one.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	action := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(action, '.'); i >= 0 {
		action = action[i+1:]
	}
	if action == "" {
		action = "(no X-Amz-Target)"
	}
	c.counter(action).Add(1)
	resp, err := c.next.Do(req)
	if err != nil || action != "ReceiveMessage" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(body, []byte(`"ReceiptHandle"`)) {
		c.empty.Add(1)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// Proxy returns an HTTP handler that sends each request it serves on to the server at target (a
// scheme and a host, as "http://127.0.0.1:4100") through c, which counts it as Do does, and
// writes the answer back: it counts the requests of a client that is not a Go SDK client (a Node
// consumer given the handler's address as its endpoint) the same way as a Go client's. The
// request keeps its Host header, which its signature covers.
func (c *Client) Proxy(target string) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("reqcount: target %q: %w", target, err)
	}
	if u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("reqcount: target %q needs a scheme and a host", target)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
		resp, err := c.Do(out)
		if err != nil {
			http.Error(w, "reqcount: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}), nil
}

// GetTimeout passes the wrapped client's timeout through (the worker reads it).
func (c *Client) GetTimeout() time.Duration {
	if hc, ok := c.next.(*http.Client); ok {
		return hc.Timeout
	}
	return 0
}

func (c *Client) counter(action string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.by[action]
	if !ok {
		n = new(atomic.Int64)
		c.by[action] = n
	}
	return n
}

// Counts is what a Client counted: requests by action, and the ReceiveMessage answers that were
// empty.
type Counts struct {
	By            map[string]int64
	EmptyReceives int64
}

// Total is the number of requests of every action.
func (c Counts) Total() (t int64) {
	for _, n := range c.By {
		t += n
	}
	return t
}

// Sub is c less an earlier snapshot o.
func (c Counts) Sub(o Counts) Counts {
	d := Counts{By: map[string]int64{}, EmptyReceives: c.EmptyReceives - o.EmptyReceives}
	for k, n := range c.By {
		if n -= o.By[k]; n != 0 {
			d.By[k] = n
		}
	}
	return d
}

// Snapshot returns the counts so far.
func (c *Client) Snapshot() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Counts{By: make(map[string]int64, len(c.by)), EmptyReceives: c.empty.Load()}
	for k, n := range c.by {
		s.By[k] = n.Load()
	}
	return s
}

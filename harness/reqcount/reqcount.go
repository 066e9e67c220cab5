// Package reqcount counts the requests an AWS SDK client sends, by API action, for the benches
// that report what a message costs in requests (SQS bills each request). It is an HTTP client
// (the SDK's HTTPClient option) that counts every attempt it is given, retries included, by the
// action in its X-Amz-Target header (the JSON protocol's "AmazonSQS.ReceiveMessage"), and counts
// the ReceiveMessage responses that held no message.
package reqcount

import (
	"bytes"
	"io"
	"net/http"
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

// Package latency puts a network's round-trip time between two local processes: a TCP proxy that
// holds every chunk of bytes from the client for the round trip (plus an optional jitter), in
// order, without limiting bandwidth, and passes the server's answers at once. The benchmarks put
// one between the worker and the SQS server (SQS is 5 to 30 ms away in AWS) and one between the
// worker and PostgreSQL (RDS in the same zone is about 1 ms away), so that a pipeline that waits
// on round trips in series shows it.
//
// The whole round trip is held on the way in, not half each way: a Go timer shorter than a
// millisecond fires after about a millisecond on an idle process here (time.Sleep(500µs) takes
// 1.1 ms), so half a 1 ms round trip each way added 2.2 to 2.4 ms. For the request-and-answer
// protocols measured (HTTP, PostgreSQL's, pipelined or not) only the round trip matters; one
// hold of 1 ms adds about 1.1 ms (BenchmarkAccuracy prints what each setting adds).
package latency

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the connections it accepts to Target with a delay. The delay and jitter can be
// changed while it runs; a chunk takes the values in force when it is read.
type Proxy struct {
	target string
	ln     net.Listener
	rtt    atomic.Int64 // the round-trip time to add, in nanoseconds
	jitter atomic.Int64 // up to this much more per chunk and direction, in nanoseconds

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted atomic.Int64 // connections accepted
	open     int          // client connections open now (under mu)
	maxOpen  int          // the most open at once (under mu)
}

// Start listens on a free loopback port and forwards each connection to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetRTT sets the round-trip time the proxy adds (held on the way in) and the jitter (up to this
// much more per chunk, never reordering bytes).
func (p *Proxy) SetRTT(rtt, jitter time.Duration) {
	p.rtt.Store(int64(rtt))
	p.jitter.Store(int64(jitter))
}

// RTT returns the round-trip time the proxy adds.
func (p *Proxy) RTT() time.Duration { return time.Duration(p.rtt.Load()) }

// Accepted returns the connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// MaxOpen returns the most connections that were open through the proxy at once. A client that
// keeps its connections alive has Accepted close to MaxOpen; one that closes and dials them again
// has Accepted far above it.
func (p *Proxy) MaxOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxOpen
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.mu.Lock()
	p.open++
	p.maxOpen = max(p.maxOpen, p.open)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}()
	defer p.untrack(client)
	defer p.untrack(server)
	for _, c := range []net.Conn{client, server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, server) // the answers, at once
		_ = client.Close()             // a proxy that ends one direction ends the connection
		_ = server.Close()
	}()
	wg.Wait()
}

// chunk is bytes read at one time, due to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk the round trip (plus jitter) after it was read, in order.
// Reading goes on while earlier chunks wait, so the delay adds latency, not a bandwidth limit.
// When either side ends, both connections close.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				for range q { // drain, so the reader never blocks
				}
				return
			}
		}
	}()
	var last time.Time
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			due := time.Now().Add(time.Duration(p.rtt.Load()))
			if j := p.jitter.Load(); j > 0 {
				due = due.Add(time.Duration(rand.Int64N(j + 1)))
			}
			if due.Before(last) {
				due = last // never reorder
			}
			last = due
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: due}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			break
		}
	}
	close(q)
	<-done
	// The other side may still be sending; closing the write side would be enough for TCP, but
	// a proxy that ends one direction ends the connection.
	_ = dst.Close()
}

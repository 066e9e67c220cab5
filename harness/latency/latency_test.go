package latency_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/latency"
)

// echo starts a server that writes back what it reads, line by line.
func echo(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

func roundTrip(t testing.TB, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo: %q, %v; want %q", got, err, line)
	}
}

// TestAddsTheRoundTrip (no server but a local echo): a request and its answer through the proxy
// take at least the round-trip time it adds (a lower bound, which the proxy guarantees by holding
// each chunk), and with jitter the bytes still arrive whole and in order.
func TestAddsTheRoundTrip(t *testing.T) {
	t.Parallel()
	p, err := latency.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetRTT(40*time.Millisecond, 0)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := range 3 {
		start := time.Now()
		roundTrip(t, c, r, fmt.Sprint("ping ", i))
		if el := time.Since(start); el < 40*time.Millisecond {
			t.Fatalf("round trip %d took %v through a proxy adding 40ms", i, el)
		}
	}
	// Many small writes with jitter: in order, nothing lost.
	p.SetRTT(2*time.Millisecond, 3*time.Millisecond)
	var want bytes.Buffer
	go func() {
		for i := range 2000 {
			_, _ = fmt.Fprintf(c, "%d\n", i)
		}
	}()
	for i := range 2000 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (%v); out of order or short", len(got), err)
	}
}

// BenchmarkOverhead measures the proxy's own cost at zero delay: round trips of a small line
// through it against the same echo server direct, in one run, and prints the ratio.
func BenchmarkOverhead(b *testing.B) {
	addr := echo(b)
	p, err := latency.Start(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	rate := func(to string) float64 {
		c, err := net.Dial("tcp", to)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		const n = 5000
		start := time.Now()
		for range n {
			roundTrip(b, c, r, "0123456789abcdef")
		}
		return n / time.Since(start).Seconds()
	}
	for b.Loop() {
		direct, proxied := rate(addr), rate(p.Addr())
		b.ReportMetric(direct, "direct-rt/s")
		b.ReportMetric(proxied, "proxied-rt/s")
		b.ReportMetric(proxied/direct, "ratio")
		fmt.Printf("latency proxy at zero delay: %.0f round trips/s direct, %.0f through the proxy: %.2fx (%.1f µs added per round trip)\n",
			direct, proxied, proxied/direct, (1/proxied-1/direct)*1e6)
	}
}

// BenchmarkAccuracy prints what the proxy adds to a round trip at each setting: the median of
// 200 round trips of a small line through it, less the median direct, in one run. A Go timer
// fires late by up to about a tenth of a millisecond (and a millisecond late when set for less
// than one), so a setting of 1 ms adds a little more than 1 ms.
func BenchmarkAccuracy(b *testing.B) {
	addr := echo(b)
	p, err := latency.Start(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	median := func(to string) time.Duration {
		c, err := net.Dial("tcp", to)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		d := make([]time.Duration, 200)
		for i := range d {
			start := time.Now()
			roundTrip(b, c, r, "0123456789abcdef")
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	for b.Loop() {
		direct := median(addr)
		for _, rtt := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
			p.SetRTT(rtt, 0)
			added := median(p.Addr()) - direct
			b.ReportMetric(float64(added)/float64(rtt), fmt.Sprintf("added/set-%v", rtt))
			fmt.Printf("latency proxy set to %v: adds %v to a round trip (median of 200; direct %v): %.3fx the setting\n",
				rtt, added.Round(time.Microsecond), direct.Round(time.Microsecond), float64(added)/float64(rtt))
		}
	}
}

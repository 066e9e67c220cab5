package reliability

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
)

// PGProxy is a TCP proxy in front of PostgreSQL that cuts connections in the middle of COMMIT.
// It reads the frontend protocol (after the startup packet, every message is a type byte and a
// 4-byte length) and watches for simple Query messages ('Q') whose text is COMMIT, which is how
// pgx sends a transaction's commit. Every CutEvery-th COMMIT is cut, alternating between:
//   - before: the connection is closed without forwarding the COMMIT (the transaction does not
//     commit; the client cannot know);
//   - after: the COMMIT is forwarded and the connection closed before the server's answer
//     reaches the client (the transaction commits; the client cannot know).
type PGProxy struct {
	// CutEvery cuts every nth COMMIT; 0 cuts none.
	CutEvery atomic.Int64

	ln      net.Listener
	target  string
	commits atomic.Int64
	// CutBefore and CutAfter count the cuts of each kind.
	CutBefore, CutAfter atomic.Int64
	wg                  sync.WaitGroup
	mu                  sync.Mutex
	conns               map[net.Conn]bool
	closed              bool
}

// NewPGProxy listens on a free 127.0.0.1 port and forwards to target (host:port).
func NewPGProxy(target string) (*PGProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &PGProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL rewrites a postgres:// URL to go through the proxy.
func (p *PGProxy) URL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Commits returns the COMMITs seen.
func (p *PGProxy) Commits() int64 { return p.commits.Load() }

// Close stops the proxy and closes every connection.
func (p *PGProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *PGProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *PGProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *PGProxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer p.track(client, false)
	defer p.track(server, false)
	var doomed atomic.Bool // set before a COMMIT is forwarded whose answer must not arrive
	closeBoth := func() { _ = client.Close(); _ = server.Close() }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // server → client
		defer wg.Done()
		buf := make([]byte, 32*1024)
		for {
			n, err := server.Read(buf)
			if doomed.Load() {
				closeBoth()
				return
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}()
	p.clientToServer(client, server, &doomed, closeBoth)
	wg.Wait()
}

// clientToServer forwards frontend messages one by one and cuts at COMMIT.
func (p *PGProxy) clientToServer(client, server net.Conn, doomed *atomic.Bool, closeBoth func()) {
	defer closeBoth()
	// Startup (and SSLRequest) packets have no type byte: a length and a body.
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		body := make([]byte, max(0, n-8))
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			return
		}
		if code == 80877103 { // SSLRequest: the server answers one byte; we ask sslmode=disable
			continue
		}
		break
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		body := make([]byte, max(0, n-4))
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		if hdr[0] == 'Q' && isCommit(body) {
			c := p.commits.Add(1)
			if every := p.CutEvery.Load(); every > 0 && c%every == 0 {
				if (c/every)%2 == 1 {
					p.CutBefore.Add(1)
					return // closeBoth: the COMMIT never reaches the server
				}
				// The server→client side closes both when the answer arrives, so the
				// server has surely executed the COMMIT; the client never sees the answer.
				p.CutAfter.Add(1)
				doomed.Store(true)
			}
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

func isCommit(q []byte) bool {
	q = bytes.TrimRight(q, "\x00")
	q = bytes.TrimSpace(bytes.TrimRight(bytes.TrimSpace(q), ";"))
	return bytes.EqualFold(q, []byte("commit")) || bytes.EqualFold(q, []byte("end"))
}

func hostPort(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(5432)
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

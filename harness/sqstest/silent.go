package sqstest

import (
	"net"
	"testing"
)

// SilentEndpoint returns the address (host:port) of a TCP listener on 127.0.0.1 that accepts
// connections and never answers: an SQS endpoint or a database that hangs. Everything is closed
// when t ends.
func SilentEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // accepted, never answered
		}
	}()
	return l.Addr().String()
}

package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// Main starts a server for a test binary, runs its tests and closes the server. Use it from
// TestMain:
//
//	var db *pgtest.Server
//	func TestMain(m *testing.M) { pgtest.Main(m, "inbox", &db) }
//
// When no server can be had, it prints why (naming the docker compose alternative) and exits 1:
// the tests fail, they are never skipped. Each of after runs once the tests passed (a goroutine
// leak check, say); an error from one fails the test binary.
func Main(m *testing.M, prefix string, out **Server, after ...func() error) {
	s, err := Start(context.Background(), prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*out = s
	code := m.Run()
	s.Close()
	for _, check := range after {
		if code != 0 {
			break
		}
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

package sqstest

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"

	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// Logger is workertest.Logger: warnings and errors to t.Log.
func Logger(t testing.TB) *slog.Logger { return workertest.Logger(t) }

// Buffer is a bytes buffer that one goroutine may read while others write to it: the output of
// a child process, or of a logger under test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package sqstest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a logger that writes records of level Warn and above to t.Log, and drops the
// rest (and anything logged after t ended).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(&tlogHandler{t: t, h: slog.NewTextHandler(io.Discard, nil)})
}

type tlogHandler struct {
	t     testing.TB
	h     slog.Handler
	attrs []slog.Attr
}

func (h *tlogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *tlogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	defer func() { _ = recover() }() // t.Log after the test ended panics
	h.t.Log(b.String())
	return nil
}

func (h *tlogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tlogHandler{t: h.t, h: h.h, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *tlogHandler) WithGroup(string) slog.Handler { return h }

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

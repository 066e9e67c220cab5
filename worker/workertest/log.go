package workertest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// Logger returns a logger that writes records of level Warn and above to t.Log, and drops the
// rest (and anything logged after t ended). Give it to a worker under test as Config.Logger.
func Logger(t testing.TB) *slog.Logger { return slog.New(&tlogHandler{t: t}) }

type tlogHandler struct {
	t     testing.TB
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
	return &tlogHandler{t: h.t, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *tlogHandler) WithGroup(string) slog.Handler { return h }

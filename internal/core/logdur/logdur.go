// Package logdur makes the durations a library logs readable in any log format: slog's JSON
// handler writes a time.Duration as an integer of nanoseconds ("retry_in":1000000000); through
// Handler it is the Go duration string ("retry_in":"1s").
package logdur

import (
	"context"
	"log/slog"
)

// Logger returns l with its durations written as strings (l itself if it does so already).
func Logger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(handler); ok {
		return l
	}
	return slog.New(handler{l.Handler()})
}

// handler writes the duration attributes of its records, and of the attributes given to
// WithAttrs, as strings, at any depth of groups, and hands the rest to the handler it wraps.
type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	has := false
	r.Attrs(func(a slog.Attr) bool {
		has = hasDuration(a)
		return !has
	})
	if !has {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(convert(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	conv := make([]slog.Attr, len(as))
	for i, a := range as {
		conv[i] = convert(a)
	}
	return handler{h.Handler.WithAttrs(conv)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }

// hasDuration and convert resolve a slog.LogValuer first: its value (a handler's LogValue group,
// say) may hold durations too.
func hasDuration(a slog.Attr) bool {
	switch a.Value.Resolve().Kind() {
	case slog.KindDuration:
		return true
	case slog.KindGroup:
		for _, g := range a.Value.Group() {
			if hasDuration(g) {
				return true
			}
		}
	}
	return false
}

func convert(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindGroup:
		g := a.Value.Group()
		conv := make([]any, len(g))
		for i, x := range g {
			conv[i] = convert(x)
		}
		return slog.Group(a.Key, conv...)
	}
	return a
}

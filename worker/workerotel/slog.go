package workerotel

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys that [LogHandler] adds.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// LogHandler returns next wrapped so that a record logged with a context whose span context is
// valid (a handler's ctx inside [Middleware], for example) carries the attributes trace_id and
// span_id, in W3C's hex form. Records without such a context pass through unchanged. Inside a
// group opened with WithGroup, the ids are in that group, like every attribute added there.
//
//	slog.SetDefault(slog.New(workerotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil))))
func LogHandler(next slog.Handler) slog.Handler { return &logHandler{next: next} }

type logHandler struct{ next slog.Handler }

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the record's attributes may be shared with other handlers
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{next: h.next.WithAttrs(attrs)}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{next: h.next.WithGroup(name)}
}

package workerotel_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// newTracing returns a tracer provider that exports every span, as it ends, to the returned
// in-memory exporter.
func newTracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(context.Background())) })
	return tp, exp
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs fails unless span s has each of want (values compared as strings).
func wantAttrs(t testing.TB, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[k]; !ok || g.String() != v {
			t.Errorf("span %q: %s = %q (present %v), want %q", s.Name, k, g.String(), ok, v)
		}
	}
}

// byName returns the spans named name.
func byName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// children returns the spans whose parent is p, in the order they started.
func children(spans tracetest.SpanStubs, p trace.SpanContext) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == p.SpanID() && s.Parent.TraceID() == p.TraceID() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	return out
}

// shownAttrs are the attributes spanTree prints, in this order; ids that change on every run
// are shown shortened.
var shownAttrs = []attribute.Key{
	"messaging.system", "messaging.operation.name", "messaging.destination.name", "messaging.message.id",
	"sqsinbox.message.receive_count", "sqsinbox.inbox.handler", "sqsinbox.inbox.event_key", "sqsinbox.inbox.claim",
	"sqsinbox.inbox.outcome", "sqsinbox.message.outcome", "error.type",
}

// spanTree draws the spans of root's trace as a tree from root, each with its kind, its
// duration and the attributes of shownAttrs it has (on lines of their own for a long list).
func spanTree(spans tracetest.SpanStubs, root tracetest.SpanStub) string {
	var b strings.Builder
	var walk func(s tracetest.SpanStub, prefix, branch string)
	walk = func(s tracetest.SpanStub, prefix, branch string) {
		kids := children(spans, s.SpanContext)
		next := prefix
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		a := attrs(s)
		var parts []string
		for _, k := range shownAttrs {
			if strings.HasPrefix(s.Name, "inbox ") && k != "sqsinbox.inbox.outcome" {
				continue // the handler and key are on the message's span
			}
			if v, ok := a[k]; ok {
				parts = append(parts, fmt.Sprintf("%s=%s", k, shorten(k, v.String())))
			}
		}
		if s.Status.Code != 0 {
			parts = append(parts, "status="+s.Status.Code.String())
		}
		if len(s.Links) > 0 {
			parts = append(parts, fmt.Sprintf("links=%d", len(s.Links)))
		}
		fmt.Fprintf(&b, "%s%s%s (%s, %s)", prefix, branch, s.Name, s.SpanKind, s.EndTime.Sub(s.StartTime).Round(100_000))
		switch len(parts) {
		case 0:
			b.WriteByte('\n')
		case 1:
			fmt.Fprintf(&b, " %s\n", parts[0])
		default:
			b.WriteByte('\n')
			bar := "   "
			if len(kids) > 0 {
				bar = "│  "
			}
			line := ""
			for _, p := range parts {
				if line != "" && len(line)+len(p) > 72 {
					fmt.Fprintf(&b, "%s%s%s\n", next, bar, line)
					line = ""
				}
				line = strings.TrimSpace(line + " " + p)
			}
			fmt.Fprintf(&b, "%s%s%s\n", next, bar, line)
		}
		for i, k := range kids {
			walk(k, next, cmp.Or(map[bool]string{true: "└─ "}[i == len(kids)-1], "├─ "))
		}
	}
	walk(root, "", "")
	return b.String()
}

func shorten(k attribute.Key, v string) string {
	if k == "messaging.message.id" && len(v) > 8 {
		return v[:8] + "…"
	}
	return v
}

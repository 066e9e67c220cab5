// Package workeroteltest prints the spans of a trace, as the SDK's in-memory exporter
// (go.opentelemetry.io/otel/sdk/trace/tracetest) recorded them, as a tree: the producer's span,
// the message's span under it, and the inbox's claim and commit under that. Tests use it to show
// a whole trace in their log.
package workeroteltest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// ByName returns the spans named name, in the order the exporter has them.
func ByName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Children returns the spans whose parent is p, in the order they started.
func Children(spans tracetest.SpanStubs, p trace.SpanContext) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.SpanID() == p.SpanID() && s.Parent.TraceID() == p.TraceID() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	return out
}

// shownAttrs are the attributes SpanTree prints, in this order; ids that change on every run
// are shown shortened.
var shownAttrs = []attribute.Key{
	"messaging.system", "messaging.operation.name", "messaging.destination.name", "messaging.message.id",
	"sqsinbox.message.receive_count", "sqsinbox.inbox.handler", "sqsinbox.inbox.event_key", "sqsinbox.inbox.claim",
	"sqsinbox.inbox.outcome", "sqsinbox.message.outcome", "error.type",
}

// SpanTree draws the spans of root's trace as a tree from root, each with its kind, its
// duration and the attributes of shownAttrs it has (on lines of their own for a long list).
func SpanTree(spans tracetest.SpanStubs, root tracetest.SpanStub) string {
	var b strings.Builder
	var walk func(s tracetest.SpanStub, prefix, branch string)
	walk = func(s tracetest.SpanStub, prefix, branch string) {
		kids := Children(spans, s.SpanContext)
		next := prefix
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes {
			a[kv.Key] = kv.Value
		}
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

package workerotel_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// TestLogHandler: a record logged with a span's context carries its trace and span ids; one
// without a span does not.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	tp, _ := newTracing(t)
	var buf bytes.Buffer
	log := slog.New(workerotel.LogHandler(slog.NewJSONHandler(&buf, nil))).With("queue", "orders")
	ctx, span := tp.Tracer("test").Start(t.Context(), "process orders")
	log.InfoContext(ctx, "in a span", "n", 1)
	span.End()
	log.InfoContext(t.Context(), "no span")
	log.WithGroup("g").InfoContext(ctx, "in a group")

	dec := json.NewDecoder(&buf)
	var recs []map[string]any
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	sc := span.SpanContext()
	if recs[0]["trace_id"] != sc.TraceID().String() || recs[0]["span_id"] != sc.SpanID().String() || recs[0]["queue"] != "orders" {
		t.Errorf("record in a span: %v, want trace_id %s span_id %s and queue", recs[0], sc.TraceID(), sc.SpanID())
	}
	if _, ok := recs[1]["trace_id"]; ok {
		t.Errorf("record without a span has a trace_id: %v", recs[1])
	}
	if g, _ := recs[2]["g"].(map[string]any); g["trace_id"] != sc.TraceID().String() {
		t.Errorf("record in a group: %v, want the ids in the group", recs[2])
	}
}

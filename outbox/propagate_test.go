package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// TestAddCarriesTraceContext (PostgreSQL): Config.Propagate's headers are stored as String
// attributes, never over one the message sets itself, never past SQS's 10 attributes, and never
// at the cost of the message.
func TestAddCarriesTraceContext(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b := setup(t, &outbox.Config{Propagate: func(context.Context) map[string]string {
		return map[string]string{"traceparent": tp, "tracestate": "vendor=1"}
	}})
	stored := func(eventID, name string) string {
		t.Helper()
		var v *string
		err := b.pool.QueryRow(t.Context(), `SELECT attributes->$2->>'StringValue' FROM `+b.schema+`.outbox_messages WHERE event_id = $1`,
			eventID, name).Scan(&v)
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return ""
		}
		return *v
	}
	url := "https://sqs.us-east-1.amazonaws.com/000000000000/orders"
	b.add(t, outbox.Message{Destination: url, Body: `{"id":"evt_1"}`, EventID: "evt_1"})
	if got := stored("evt_1", "traceparent"); got != tp {
		t.Errorf("traceparent stored as %q, want %q", got, tp)
	}
	if got := stored("evt_1", "tracestate"); got != "vendor=1" {
		t.Errorf("tracestate stored as %q", got)
	}

	// The message's own attribute wins.
	b.add(t, outbox.Message{Destination: url, Body: "x", EventID: "evt_2",
		Attributes: map[string]outbox.Attribute{"traceparent": outbox.StringAttribute("mine")}})
	if got := stored("evt_2", "traceparent"); got != "mine" {
		t.Errorf("the message's own traceparent became %q", got)
	}

	// Eight of the message's own, the event_id: room for one header, in name order.
	full := map[string]outbox.Attribute{}
	for i := range 8 {
		full[fmt.Sprintf("a%d", i)] = outbox.StringAttribute("v")
	}
	b.add(t, outbox.Message{Destination: url, Body: "x", EventID: "evt_3", Attributes: full})
	if stored("evt_3", "traceparent") != tp || stored("evt_3", "tracestate") != "" {
		t.Errorf("with room for one header: traceparent %q, tracestate %q; want only traceparent",
			stored("evt_3", "traceparent"), stored("evt_3", "tracestate"))
	}

	// Nine of its own: no room; the message is added without them.
	full["a8"] = outbox.StringAttribute("v")
	b.add(t, outbox.Message{Destination: url, Body: "x", EventID: "evt_4", Attributes: full})
	if got := stored("evt_4", "traceparent"); got != "" {
		t.Errorf("a full message got a traceparent %q", got)
	}
}

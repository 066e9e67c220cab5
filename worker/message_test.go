package worker_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/worker"
)

// TestMessageTraceID (no server): the trace id comes from traceparent (W3C, version 00), else from
// the AWSTraceHeader's Root; malformed or all-zero ids give "".
func TestMessageTraceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, traceparent, xray, want string
	}{
		{"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"traceparent wins", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"x-ray", "", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", "5759e988bd862e3fe1be46a994272793"},
		{"x-ray, Root not first", "", "Parent=53995c3f42cd8ad8; Root=1-5759e988-bd862e3fe1be46a994272793", "5759e988bd862e3fe1be46a994272793"},
		{"malformed traceparent, x-ray", "00-xyz-00f067aa0ba902b7-01", "Root=1-5759e988-bd862e3fe1be46a994272793", "5759e988bd862e3fe1be46a994272793"},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", ""},
		{"unknown version", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", ""},
		{"x-ray root too short", "", "Root=1-5759e988-bd862e3f", ""},
		{"none", "", "", ""},
	} {
		m := &worker.Message{Attributes: map[string]types.MessageAttributeValue{}, SystemAttributes: map[string]string{}}
		if tc.traceparent != "" {
			m.Attributes["traceparent"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(tc.traceparent)}
		}
		if tc.xray != "" {
			m.SystemAttributes["AWSTraceHeader"] = tc.xray
		}
		if got := m.TraceID(); got != tc.want {
			t.Errorf("%s: TraceID() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

package workerotel

import (
	"strings"
	"testing"
)

var awsTraceHeaderCases = []struct {
	header      string
	ok          bool
	trace, span string
	sampled     bool
	comment     string
}{
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", sampled: true, comment: "SQS's own example"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=?", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", comment: "deferred: not sampled"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", comment: "no Sampled"},
	{header: "Parent=53995c3f42cd8ad8; Sampled=1; Root=1-5759e988-bd862e3fe1be46a994272793;", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", sampled: true, comment: "any order, spaces, trailing ;"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:1|68fd508a:5", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", sampled: true, comment: "other fields ignored"},
	{header: "Root=1-5759E988-BD862E3FE1BE46A994272793;Parent=53995C3F42CD8AD8;Sampled=1", ok: true,
		trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8", sampled: true, comment: "upper-case hex"},
	{header: "", comment: "empty"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", comment: "no Parent: nothing to be a child of"},
	{header: "Parent=53995c3f42cd8ad8;Sampled=1", comment: "no Root"},
	{header: "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", comment: "version 2"},
	{header: "Root=1-5759e988-bd862e3fe1be46a99427279;Parent=53995c3f42cd8ad8", comment: "short root"},
	{header: "Root=1-5759e988_bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", comment: "bad separator"},
	{header: "Root=1-5759e98g-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", comment: "not hex"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad", comment: "short parent"},
	{header: "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8", comment: "zero trace id"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", comment: "zero span id"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Root=1-5759e988-bd862e3fe1be46a994272794;Parent=53995c3f42cd8ad8", comment: "two roots"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Parent=53995c3f42cd8ad9", comment: "two parents"},
	{header: "root=1-5759e988-bd862e3fe1be46a994272793;parent=53995c3f42cd8ad8", comment: "keys are case-sensitive"},
	{header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;" + strings.Repeat("x", maxAWSTraceHeader), comment: "too long"},
}

func TestParseAWSTraceHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range awsTraceHeaderCases {
		sc, ok := parseAWSTraceHeader(tc.header)
		if ok != tc.ok {
			t.Errorf("%q (%s): ok = %v, want %v", tc.header, tc.comment, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if sc.TraceID().String() != tc.trace || sc.SpanID().String() != tc.span || sc.IsSampled() != tc.sampled || !sc.IsRemote() {
			t.Errorf("%q (%s): %s/%s sampled %v remote %v, want %s/%s sampled %v remote", tc.header, tc.comment,
				sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote(), tc.trace, tc.span, tc.sampled)
		}
	}
}

// FuzzParseAWSTraceHeader: the header is untrusted (any producer sets it). The parser never
// panics, and what it accepts is a valid remote span context whose ids are the header's Root
// and Parent.
func FuzzParseAWSTraceHeader(f *testing.F) {
	for _, tc := range awsTraceHeaderCases {
		f.Add(tc.header)
	}
	f.Fuzz(func(t *testing.T, h string) {
		sc, ok := parseAWSTraceHeader(h)
		if !ok {
			return
		}
		if !sc.IsValid() || !sc.IsRemote() {
			t.Fatalf("%q: accepted an invalid or local span context %v", h, sc)
		}
		tid := sc.TraceID().String()
		root := "Root=1-" + tid[:8] + "-" + tid[8:]
		parent := "Parent=" + sc.SpanID().String()
		lower := strings.ToLower(h)
		if !strings.Contains(lower, strings.ToLower(root)) || !strings.Contains(lower, strings.ToLower(parent)) {
			t.Fatalf("%q: parsed as %s/%s, which it does not hold", h, tid, sc.SpanID())
		}
		sampled := false
		for field := range strings.SplitSeq(h, ";") {
			sampled = sampled || strings.TrimSpace(field) == "Sampled=1"
		}
		if sc.IsSampled() != sampled {
			t.Fatalf("%q: sampled %v", h, sc.IsSampled())
		}
	})
}

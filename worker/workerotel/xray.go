package workerotel

import (
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// maxAWSTraceHeader bounds the AWSTraceHeader we parse: X-Ray's header is about 100 bytes with
// Root, Parent and Sampled; anything much longer is not one.
const maxAWSTraceHeader = 1024

// parseAWSTraceHeader reads an X-Ray trace header, as SQS delivers it in the AWSTraceHeader
// system attribute (Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1),
// as a remote span context. The X-Ray trace id is its epoch part followed by its unique part (32
// hex digits in all, as the OpenTelemetry X-Ray propagator reads it); Sampled=1 is sampled and
// anything else (0, ?, absent) is not. Fields other than Root, Parent and Sampled are ignored. A
// header without a valid Root and Parent, or with one of them twice, gives false.
func parseAWSTraceHeader(h string) (trace.SpanContext, bool) {
	if len(h) > maxAWSTraceHeader {
		return trace.SpanContext{}, false
	}
	var (
		cfg                  trace.SpanContextConfig
		root, parent, sample bool
	)
	for field := range strings.SplitSeq(h, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			continue
		}
		switch k {
		case "Root":
			// 1-<8 hex digits: epoch seconds>-<24 hex digits>
			if root || len(v) != 35 || v[:2] != "1-" || v[10] != '-' ||
				!decodeHex(cfg.TraceID[:4], v[2:10]) || !decodeHex(cfg.TraceID[4:], v[11:]) {
				return trace.SpanContext{}, false
			}
			root = true
		case "Parent":
			if parent || len(v) != 16 || !decodeHex(cfg.SpanID[:], v) {
				return trace.SpanContext{}, false
			}
			parent = true
		case "Sampled":
			if sample {
				return trace.SpanContext{}, false
			}
			sample = true
			if v == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, root && parent && sc.IsValid()
}

// decodeHex decodes exactly len(dst) bytes of hex digits from s.
func decodeHex(dst []byte, s string) bool {
	if hex.DecodedLen(len(s)) != len(dst) {
		return false
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

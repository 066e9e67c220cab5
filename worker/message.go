package worker

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Message is one received SQS message, as a handler sees it.
type Message struct {
	// Queue is the name of the queue the message came from.
	Queue string
	// ID is the SQS MessageId. A producer retry or a DLQ redrive gives the same event a new one,
	// so it is not a safe deduplication key on its own.
	ID string
	// Body is the message body, the bytes as received.
	Body []byte
	// Attributes are the message attributes set by the producer (MessageAttributes in the API).
	Attributes map[string]types.MessageAttributeValue
	// SystemAttributes are the SQS system attributes (ApproximateReceiveCount, SentTimestamp, ...).
	SystemAttributes map[string]string
	// ReceiveCount is ApproximateReceiveCount: 1 on the first delivery. Some emulators always
	// report 1.
	ReceiveCount int
	// FirstReceived is ApproximateFirstReceiveTimestamp, the message's first receive ever, or the
	// local time of this receive when the queue does not report it. It is for information only:
	// SQS's 12-hour cap does not count from it ([MaxVisibility]).
	FirstReceived time.Time
	// Received is the local time taken just before the ReceiveMessage call that returned this
	// delivery; the worker counts this delivery's 12-hour cap from it ([MaxVisibility]).
	Received time.Time
	// GroupID is the MessageGroupId: on a FIFO queue the group whose order SQS keeps, and on a
	// standard queue (a fair queue) the tenant the producer named, whose messages have no order
	// (Config.MaxPerGroup caps the runners they hold). Empty when the producer set none.
	GroupID string
	// ReceiptHandle is the handle of this delivery. The worker deletes and extends the message
	// with it; handlers need not use it.
	ReceiptHandle string

	// SNS is the SNS metadata when the message arrived in an SNS notification envelope (see
	// Config.SNS); Body and Attributes are then the published ones. nil otherwise.
	SNS *SNSNotification

	// Offloaded is where the payload was fetched from ("s3://bucket/key") when the message
	// pointed to an offloaded payload (Config.Payloads); Body is then the payload. Empty
	// otherwise.
	Offloaded string
}

// TraceID returns the trace the message carried, as 32 lowercase hex digits, or "" when it carried
// none: the message attribute traceparent (W3C trace context, version 00), else the system
// attribute AWSTraceHeader's Root (X-Ray's trace id, whose two parts make the 32 digits, as
// OpenTelemetry's X-Ray propagator reads them). It does not check that the trace is sampled.
func (m *Message) TraceID() string {
	if tp, ok := m.Attribute("traceparent"); ok {
		// 00-<32 hex: trace id>-<16 hex: parent id>-<2 hex: flags>
		if len(tp) >= 55 && tp[:3] == "00-" && tp[35] == '-' && isHex(tp[3:35]) && tp[3:35] != zeroTraceID {
			return strings.ToLower(tp[3:35])
		}
	}
	for field := range strings.SplitSeq(m.SystemAttributes["AWSTraceHeader"], ";") {
		// Root=1-<8 hex: epoch seconds>-<24 hex>
		if v, ok := strings.CutPrefix(strings.TrimSpace(field), "Root="); ok && len(v) == 35 && v[:2] == "1-" && v[10] == '-' &&
			isHex(v[2:10]) && isHex(v[11:]) {
			return strings.ToLower(v[2:10] + v[11:])
		}
	}
	return ""
}

// zeroTraceID is W3C's invalid trace id.
const zeroTraceID = "00000000000000000000000000000000"

func isHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// Attribute returns the string value of the message attribute name (a String or Number
// attribute), and whether it was present.
func (m *Message) Attribute(name string) (string, bool) {
	a, ok := m.Attributes[name]
	if !ok || a.StringValue == nil {
		return "", false
	}
	return *a.StringValue, true
}

// newMessage makes a Message of a received one; requested is the local time taken before the
// ReceiveMessage call.
func newMessage(sm *types.Message, requested time.Time) *Message {
	m := &Message{
		Attributes:       sm.MessageAttributes,
		SystemAttributes: sm.Attributes,
		Received:         requested,
		FirstReceived:    requested,
		ReceiveCount:     1,
	}
	if sm.MessageId != nil {
		m.ID = *sm.MessageId
	}
	if sm.Body != nil {
		m.Body = []byte(*sm.Body)
	}
	if sm.ReceiptHandle != nil {
		m.ReceiptHandle = *sm.ReceiptHandle
	}
	if v, err := strconv.Atoi(sm.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && v > 0 {
		m.ReceiveCount = v
	}
	if v, err := strconv.ParseInt(sm.Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64); err == nil && v > 0 {
		if t := time.UnixMilli(v); t.Before(requested) {
			m.FirstReceived = t
		}
	}
	m.GroupID = sm.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
	return m
}

// leaseCap is the latest time m may stay invisible: MaxVisibility from m.Received, less capMargin
// (the 12-hour cap: see lease.go).
func leaseCap(m *Message) time.Time { return m.Received.Add(MaxVisibility - capMargin) }

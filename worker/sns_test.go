package worker

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// envelope is an SNS notification as SNS delivers it to SQS without raw message delivery (the
// field order and escaping of SNS's own JSON).
const envelope = `{
  "Type" : "Notification",
  "MessageId" : "5b2c7e1e-0000-4000-8000-000000000001",
  "TopicArn" : "arn:aws:sns:us-east-1:000000000000:orders",
  "Subject" : "OrderPaid",
  "Message" : "{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}",
  "Timestamp" : "2026-12-01T14:02:11.123Z",
  "SignatureVersion" : "1",
  "Signature" : "c2ln",
  "SigningCertURL" : "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
  "UnsubscribeURL" : "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
  "MessageAttributes" : {
    "event_id" : {"Type":"String","Value":"evt_9f3k"},
    "amount" : {"Type":"Number","Value":"12.50"},
    "blob" : {"Type":"Binary","Value":"AAEC"},
    "tags" : {"Type":"String.Array","Value":"[\"a\",\"b\"]"}
  }
}`

func TestUnwrapSNS(t *testing.T) {
	t.Parallel()
	m := &Message{Body: []byte(envelope)}
	if err := UnwrapSNS(m, SNSAuto); err != nil {
		t.Fatal(err)
	}
	if string(m.Body) != `{"id":"evt_9f3k","order_id":"o-1"}` {
		t.Errorf("body %s", m.Body)
	}
	if v, _ := m.Attribute("event_id"); v != "evt_9f3k" {
		t.Errorf("event_id attribute %q", v)
	}
	if v, _ := m.Attribute("amount"); v != "12.50" || aws.ToString(m.Attributes["amount"].DataType) != "Number" {
		t.Errorf("amount attribute %+v", m.Attributes["amount"])
	}
	if b := m.Attributes["blob"].BinaryValue; string(b) != "\x00\x01\x02" {
		t.Errorf("binary attribute %q, want the base64 decoded", b)
	}
	if v, _ := m.Attribute("tags"); v != `["a","b"]` {
		t.Errorf("String.Array attribute %q", v)
	}
	want := SNSNotification{TopicARN: "arn:aws:sns:us-east-1:000000000000:orders", MessageID: "5b2c7e1e-0000-4000-8000-000000000001",
		Subject: "OrderPaid", Timestamp: time.Date(2026, 12, 1, 14, 2, 11, 123e6, time.UTC)}
	if m.SNS == nil || *m.SNS != want {
		t.Errorf("SNS %+v, want %+v", m.SNS, want)
	}
}

func TestUnwrapSNSModes(t *testing.T) {
	t.Parallel()
	notification := func(replace ...string) string { return strings.NewReplacer(replace...).Replace(envelope) }
	for _, tc := range []struct {
		name    string
		body    string
		mode    SNSMode
		err     error // nil: accepted
		unwraps bool
	}{
		{"raw JSON, auto", `{"id":"evt_1"}`, SNSAuto, nil, false},
		{"not JSON, auto", `hello`, SNSAuto, nil, false},
		{"JSON array, auto", `[1,2]`, SNSAuto, nil, false},
		{"Type without TopicArn, auto", `{"Type":"Notification","id":"evt_1"}`, SNSAuto, nil, false},
		{"envelope, auto", envelope, SNSAuto, nil, true},
		{"envelope, raw mode", envelope, SNSRaw, nil, false},
		{"envelope, envelope mode", envelope, SNSEnvelope, nil, true},
		{"raw JSON, envelope mode", `{"id":"evt_1"}`, SNSEnvelope, ErrSNSEnvelope, false},
		{"not JSON, envelope mode", `hello`, SNSEnvelope, ErrSNSEnvelope, false},
		{"Message not a string", notification(`"Message" : "{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}"`, `"Message" : {"id":"evt_9f3k"}`), SNSAuto, ErrSNSEnvelope, false},
		{"no Message", notification(`"Message" : "{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}",`, ``), SNSAuto, ErrSNSEnvelope, false},
		{"subscription confirmation", notification(`"Type" : "Notification"`, `"Type" : "SubscriptionConfirmation"`), SNSAuto, ErrSNSNotNotification, false},
		{"unknown type", notification(`"Type" : "Notification"`, `"Type" : "Gossip"`), SNSAuto, ErrSNSNotNotification, false},
		{"TopicArn not an ARN", notification(`arn:aws:sns:us-east-1:000000000000:orders`, `orders`), SNSAuto, ErrSNSEnvelope, false},
		{"no MessageId", notification(`"MessageId" : "5b2c7e1e-0000-4000-8000-000000000001",`, ``), SNSAuto, ErrSNSEnvelope, false},
		{"bad timestamp", notification(`2026-12-01T14:02:11.123Z`, `yesterday`), SNSAuto, ErrSNSEnvelope, false},
		{"binary not base64", notification(`"AAEC"`, `"%%%"`), SNSAuto, ErrSNSEnvelope, false},
		{"unknown attribute type", notification(`{"Type":"Number","Value":"12.50"}`, `{"Type":"Date","Value":"x"}`), SNSAuto, ErrSNSEnvelope, false},
	} {
		m := &Message{Body: []byte(tc.body)}
		err := UnwrapSNS(m, tc.mode)
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		case tc.unwraps != (m.SNS != nil):
			t.Errorf("%s: unwrapped %v, want %v", tc.name, m.SNS != nil, tc.unwraps)
		case !tc.unwraps && string(m.Body) != tc.body:
			t.Errorf("%s: body changed to %s", tc.name, m.Body)
		}
	}
}

// victim is an envelope-shaped body naming the event evt_victim, in its MessageAttributes and in
// its Message's id: what a producer relaying user-supplied content as a body may be made to send.
var victim = strings.ReplaceAll(envelope, "evt_9f3k", "evt_victim")

// sqsAttributeCases are messages that carry SQS message attributes of their own (or none), and
// what UnwrapSNS must make of each. They seed FuzzUnwrapSNS.
var sqsAttributeCases = []struct {
	name     string
	body     string
	mode     SNSMode
	sqsAttrs map[string]string // String SQS message attributes
	err      error             // nil: accepted
	unwraps  bool
	eventID  string // the event_id attribute afterwards ("": none)
}{
	{"envelope body with an SQS event_id, auto: a raw body", victim, SNSAuto, map[string]string{"event_id": "evt_real"}, nil, false, "evt_real"},
	{"envelope body with another SQS attribute, auto: a raw body", victim, SNSAuto, map[string]string{"traceparent": "00-x"}, nil, false, ""},
	{"envelope body with an SQS event_id, raw mode", victim, SNSRaw, map[string]string{"event_id": "evt_real"}, nil, false, "evt_real"},
	{"envelope body with an SQS event_id, envelope mode: refused", victim, SNSEnvelope, map[string]string{"event_id": "evt_real"}, ErrSNSEnvelope, false, "evt_real"},
	{"envelope body with another SQS attribute, envelope mode: refused", victim, SNSEnvelope, map[string]string{"traceparent": "00-x"}, ErrSNSEnvelope, false, ""},
	{"raw body with an SQS event_id, envelope mode", `{"id":"evt_1"}`, SNSEnvelope, map[string]string{"event_id": "evt_real"}, ErrSNSEnvelope, false, "evt_real"},
	{"raw body with an SQS event_id, auto", `{"id":"evt_1"}`, SNSAuto, map[string]string{"event_id": "evt_real"}, nil, false, "evt_real"},
	// As SNS delivers it: no SQS attributes, the published ones in the envelope.
	{"envelope without SQS attributes, auto", victim, SNSAuto, nil, nil, true, "evt_victim"},
	{"envelope without SQS attributes, envelope mode", victim, SNSEnvelope, nil, nil, true, "evt_victim"},
	{"envelope with an empty SQS attribute map, auto", victim, SNSAuto, map[string]string{}, nil, true, "evt_victim"},
}

// TestUnwrapSNSKeepsSQSAttributes: an envelope's attributes never replace the SQS message's own,
// in any mode. In SNSAuto a body shaped like an envelope on a message with SQS attributes is a
// raw body (SNS puts none on an enveloped delivery); SNSEnvelope refuses such a message.
func TestUnwrapSNSKeepsSQSAttributes(t *testing.T) {
	t.Parallel()
	for _, tc := range sqsAttributeCases {
		sqsAttrs := stringAttributes(tc.sqsAttrs)
		m := &Message{Body: []byte(tc.body), Attributes: sqsAttrs}
		err := UnwrapSNS(m, tc.mode)
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if tc.unwraps != (m.SNS != nil) {
			t.Errorf("%s: unwrapped %v, want %v", tc.name, m.SNS != nil, tc.unwraps)
		}
		if !tc.unwraps && string(m.Body) != tc.body {
			t.Errorf("%s: body changed to %s", tc.name, m.Body)
		}
		if v, _ := m.Attribute("event_id"); v != tc.eventID {
			t.Errorf("%s: event_id attribute %q, want %q", tc.name, v, tc.eventID)
		}
		for k, v := range tc.sqsAttrs {
			if got, _ := m.Attribute(k); got != v {
				t.Errorf("%s: SQS attribute %s is %q, want %q (attributes %v)", tc.name, k, got, v, slices.Sorted(maps.Keys(m.Attributes)))
			}
		}
		if len(tc.sqsAttrs) > 0 && len(m.Attributes) != len(tc.sqsAttrs) {
			t.Errorf("%s: %d attributes, want the %d SQS ones only", tc.name, len(m.Attributes), len(tc.sqsAttrs))
		}
	}
}

// stringAttributes makes SQS message attributes of String values; nil stays nil.
func stringAttributes(in map[string]string) map[string]types.MessageAttributeValue {
	if in == nil {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(in))
	for k, v := range in {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

// FuzzUnwrapSNS feeds UnwrapSNS any body in any mode, on a message with or without an SQS
// event_id attribute (eventID, "" for none).
func FuzzUnwrapSNS(f *testing.F) {
	f.Add(envelope, 0, "")
	f.Add(`{"Type":"Notification","TopicArn":"arn:x","MessageId":"1","Message":"x"}`, 2, "")
	f.Add(`{"id":"evt_1"}`, 0, "")
	f.Add(`{"Type":1,"TopicArn":null}`, 2, "")
	for _, tc := range sqsAttributeCases {
		f.Add(tc.body, int(tc.mode), tc.sqsAttrs["event_id"])
	}
	f.Fuzz(func(t *testing.T, body string, mode int, eventID string) {
		m := &Message{Body: []byte(body)}
		if eventID != "" {
			m.Attributes = stringAttributes(map[string]string{"event_id": eventID})
		}
		md := SNSMode(((mode % 3) + 3) % 3)
		err := UnwrapSNS(m, md)
		if err != nil && !errors.Is(err, ErrSNSEnvelope) && !errors.Is(err, ErrSNSNotNotification) {
			t.Fatalf("untyped error %v", err)
		}
		if err != nil && m.SNS != nil {
			t.Fatal("an error and an unwrapped message")
		}
		if md == SNSRaw && (err != nil || string(m.Body) != body) {
			t.Fatal("raw mode changed the message")
		}
		if md == SNSEnvelope && err == nil && m.SNS == nil {
			t.Fatal("envelope mode accepted a body that is no envelope")
		}
		if eventID == "" {
			return
		}
		// A message with SQS attributes of its own is never unwrapped: its event_id stays.
		if v, _ := m.Attribute("event_id"); v != eventID || len(m.Attributes) != 1 {
			t.Fatalf("the SQS event_id %q became %q (attributes %v)", eventID, v, slices.Sorted(maps.Keys(m.Attributes)))
		}
		if m.SNS != nil || string(m.Body) != body {
			t.Fatal("a message with SQS attributes was unwrapped")
		}
		if md == SNSAuto && err != nil {
			t.Fatalf("auto mode refused a message with SQS attributes: %v", err)
		}
		if md == SNSEnvelope && !errors.Is(err, ErrSNSEnvelope) {
			t.Fatalf("envelope mode accepted a message with SQS attributes (error %v)", err)
		}
	})
}

func BenchmarkUnwrapSNS(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"raw JSON", `{"id":"evt_9f3k","order_id":"o-1","customer_id":"c-1","amount":1250}`},
		{"envelope", envelope},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := &Message{Body: []byte(tc.body)}
				if err := UnwrapSNS(m, SNSAuto); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package worker

import (
	"errors"
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
		name     string
		body     string
		mode     SNSMode
		err      error // nil: accepted
		unwraps  bool
		sqsAttrs map[string]types.MessageAttributeValue
	}{
		{"raw JSON, auto", `{"id":"evt_1"}`, SNSAuto, nil, false, nil},
		{"not JSON, auto", `hello`, SNSAuto, nil, false, nil},
		{"JSON array, auto", `[1,2]`, SNSAuto, nil, false, nil},
		{"Type without TopicArn, auto", `{"Type":"Notification","id":"evt_1"}`, SNSAuto, nil, false, nil},
		{"envelope, auto", envelope, SNSAuto, nil, true, nil},
		{"envelope, raw mode", envelope, SNSRaw, nil, false, nil},
		{"envelope, envelope mode", envelope, SNSEnvelope, nil, true, nil},
		{"raw JSON, envelope mode", `{"id":"evt_1"}`, SNSEnvelope, ErrSNSEnvelope, false, nil},
		{"not JSON, envelope mode", `hello`, SNSEnvelope, ErrSNSEnvelope, false, nil},
		{"Message not a string", notification(`"Message" : "{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}"`, `"Message" : {"id":"evt_9f3k"}`), SNSAuto, ErrSNSEnvelope, false, nil},
		{"no Message", notification(`"Message" : "{\"id\":\"evt_9f3k\",\"order_id\":\"o-1\"}",`, ``), SNSAuto, ErrSNSEnvelope, false, nil},
		{"subscription confirmation", notification(`"Type" : "Notification"`, `"Type" : "SubscriptionConfirmation"`), SNSAuto, ErrSNSNotNotification, false, nil},
		{"unknown type", notification(`"Type" : "Notification"`, `"Type" : "Gossip"`), SNSAuto, ErrSNSNotNotification, false, nil},
		{"TopicArn not an ARN", notification(`arn:aws:sns:us-east-1:000000000000:orders`, `orders`), SNSAuto, ErrSNSEnvelope, false, nil},
		{"no MessageId", notification(`"MessageId" : "5b2c7e1e-0000-4000-8000-000000000001",`, ``), SNSAuto, ErrSNSEnvelope, false, nil},
		{"bad timestamp", notification(`2026-12-01T14:02:11.123Z`, `yesterday`), SNSAuto, ErrSNSEnvelope, false, nil},
		{"binary not base64", notification(`"AAEC"`, `"%%%"`), SNSAuto, ErrSNSEnvelope, false, nil},
		{"unknown attribute type", notification(`{"Type":"Number","Value":"12.50"}`, `{"Type":"Date","Value":"x"}`), SNSAuto, ErrSNSEnvelope, false, nil},
		{"SQS attribute kept beside the envelope's", envelope, SNSAuto, nil, true,
			map[string]types.MessageAttributeValue{"traceparent": {DataType: aws.String("String"), StringValue: aws.String("00-x")}}},
	} {
		m := &Message{Body: []byte(tc.body), Attributes: tc.sqsAttrs}
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
		if tc.sqsAttrs != nil {
			if v, _ := m.Attribute("traceparent"); v != "00-x" {
				t.Errorf("%s: the SQS attribute was dropped: %v", tc.name, m.Attributes)
			}
		}
	}
}

func FuzzUnwrapSNS(f *testing.F) {
	f.Add(envelope, 0)
	f.Add(`{"Type":"Notification","TopicArn":"arn:x","MessageId":"1","Message":"x"}`, 2)
	f.Add(`{"id":"evt_1"}`, 0)
	f.Add(`{"Type":1,"TopicArn":null}`, 2)
	f.Fuzz(func(t *testing.T, body string, mode int) {
		m := &Message{Body: []byte(body)}
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

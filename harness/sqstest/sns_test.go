package sqstest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// snsQuirks are what the SNS of each server does where the AWS documentation says what SNS does
// (the want for KindOther). They run on GoAws too, where the SNS tests elsewhere skip, so that
// TESTING.md's account of its SNS stays true.
var snsQuirks = []quirk{
	{
		// The worker reads Type, MessageId, TopicArn, Message, Timestamp and MessageAttributes.
		name: "envelope fields",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-env"}, sqstest.SubscribeOptions{})
			id := f.publish(t, `{"id":"e1"}`, "the subject")
			env := f.envelope(t, 0)
			var got []string
			for _, k := range []string{"Type", "MessageId", "TopicArn", "Subject", "Message", "Timestamp", "SignatureVersion", "Signature", "SigningCertURL", "UnsubscribeURL"} {
				if _, ok := env[k]; !ok {
					got = append(got, "no "+k)
				}
			}
			switch {
			case env["Type"] != "Notification":
				got = append(got, fmt.Sprintf("Type %v", env["Type"]))
			case env["MessageId"] != id:
				got = append(got, "MessageId is not Publish's")
			case env["TopicArn"] != f.topic.ARN:
				got = append(got, "TopicArn is not the topic's")
			case env["Message"] != `{"id":"e1"}`:
				got = append(got, fmt.Sprintf("Message %v", env["Message"]))
			}
			if ts, _ := env["Timestamp"].(string); !isMillis(ts) {
				got = append(got, "Timestamp without milliseconds")
			}
			if len(got) == 0 {
				return "as documented"
			}
			return strings.Join(got, ", ")
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "MessageId is not Publish's, Timestamp without milliseconds",
			sqstest.KindFauxqs: "as documented",
			sqstest.KindOther:  "as documented",
		},
	},
	{
		// The worker decodes String, Number and Binary (base64) envelope attributes.
		name: "envelope MessageAttributes",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-envattr"}, sqstest.SubscribeOptions{})
			f.publishAttrs(t, `{}`, typedAttributes())
			env := f.envelope(t, 0)
			b, _ := json.Marshal(env["MessageAttributes"])
			return string(b)
		},
		want: map[sqstest.Kind]string{
			// GoAws writes SQS's attribute shape into the envelope: the worker refuses it.
			sqstest.KindGoAws:  `{"bin":{"BinaryValue":"AAH/","DataType":"Binary"},"event_id":{"DataType":"String","StringValue":"e1"},"n":{"DataType":"Number","StringValue":"42.5"}}`,
			sqstest.KindFauxqs: `{"bin":{"Type":"Binary","Value":"AAH/"},"event_id":{"Type":"String","Value":"e1"},"n":{"Type":"Number","Value":"42.5"}}`,
			sqstest.KindOther:  `{"bin":{"Type":"Binary","Value":"AAH/"},"event_id":{"Type":"String","Value":"e1"},"n":{"Type":"Number","Value":"42.5"}}`,
		},
	},
	{
		// worker.UnwrapSNS unwraps only a message without SQS message attributes: SNS puts the
		// published attributes in the envelope, none on the SQS message.
		name: "enveloped delivery has no SQS message attributes",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-envsqs"}, sqstest.SubscribeOptions{})
			f.publishAttrs(t, `{"id":"e1"}`, typedAttributes())
			m := f.receive(t, 0)
			return fmt.Sprintf("%d SQS message attributes %v", len(m.MessageAttributes), slices.Sorted(maps.Keys(m.MessageAttributes)))
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "0 SQS message attributes []",
			sqstest.KindFauxqs: "0 SQS message attributes []",
			sqstest.KindOther:  "0 SQS message attributes []",
		},
	},
	{
		// The inbox's opt-in key KeyFromSNSMessageID needs one id per publish, the same in every
		// subscribed queue.
		name: "one MessageId per publish in every queue",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-ids"}, sqstest.SubscribeOptions{}, sqstest.SubscribeOptions{})
			id := f.publish(t, `{"id":"e1"}`, "")
			a, b := f.envelope(t, 0)["MessageId"], f.envelope(t, 1)["MessageId"]
			return fmt.Sprintf("same in both queues %v, Publish's %v", a == b, a == id)
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "same in both queues false, Publish's false",
			sqstest.KindFauxqs: "same in both queues true, Publish's true",
			sqstest.KindOther:  "same in both queues true, Publish's true",
		},
	},
	{
		// With raw message delivery the queue gets the body and the attributes as published.
		name: "raw delivery",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-raw"}, sqstest.SubscribeOptions{Raw: true})
			f.publishAttrs(t, `{"id":"e1"}`, typedAttributes())
			m := f.receive(t, 0)
			var got []string
			got = append(got, "body "+aws.ToString(m.Body))
			for _, k := range slices.Sorted(maps.Keys(m.MessageAttributes)) {
				a := m.MessageAttributes[k]
				v := aws.ToString(a.StringValue)
				if a.BinaryValue != nil {
					v = fmt.Sprintf("%x", a.BinaryValue)
				}
				got = append(got, fmt.Sprintf("%s %s %s", k, aws.ToString(a.DataType), v))
			}
			return strings.Join(got, ", ")
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  `body {"id":"e1"}, bin Binary 0001ff, event_id String e1, n Number 42.5`,
			sqstest.KindFauxqs: `body {"id":"e1"}, bin Binary 0001ff, event_id String e1, n Number 42.5`,
			sqstest.KindOther:  `body {"id":"e1"}, bin Binary 0001ff, event_id String e1, n Number 42.5`,
		},
	},
	{
		// Message.SNS.SequenceNumber is filled from it.
		name: "FIFO topic envelope SequenceNumber",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-fifo", FIFO: true}, sqstest.SubscribeOptions{})
			_, err := f.sns.Publish(t.Context(), &sns.PublishInput{TopicArn: &f.topic.ARN, Message: aws.String(`{"id":"e1"}`),
				MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("e1")})
			if err != nil {
				return outcome(err, nil)
			}
			if seq, _ := f.envelope(t, 0)["SequenceNumber"].(string); seq != "" {
				return "has a SequenceNumber"
			}
			return "no SequenceNumber"
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "no SequenceNumber",
			sqstest.KindFauxqs: "no SequenceNumber",
			sqstest.KindOther:  "has a SequenceNumber",
		},
	},
	{
		// The filter policy of a subscription decides which queues get a message.
		name: "filter policy on message attributes",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-filter"},
				sqstest.SubscribeOptions{Raw: true, FilterPolicy: `{"kind":["paid"]}`}, sqstest.SubscribeOptions{Raw: true})
			if err := sqstest.Publish(t.Context(), f.sns, f.topic.ARN, []sqstest.Message{
				{Body: "a", Attributes: map[string]string{"kind": "paid"}},
				{Body: "b", Attributes: map[string]string{"kind": "refunded"}},
			}); err != nil {
				t.Fatal(err)
			}
			sqstest.WaitCount(t, srv.Client(), f.queues[1].URL, 2, 10*time.Second)
			n, err := sqstest.Count(t.Context(), srv.Client(), f.queues[0].URL)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("filtered queue got %d of 2", n)
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "filtered queue got 1 of 2",
			sqstest.KindFauxqs: "filtered queue got 1 of 2",
			sqstest.KindOther:  "filtered queue got 1 of 2",
		},
	},
	{
		// The CLI's send --topic-arn uses PublishBatch where the server has it, ten at a time
		// (nine after a refusal); sqstest.Publish sends nine at a time to GoAws.
		name: "PublishBatch of ten",
		probe: func(t *testing.T) string {
			f := newFanout(t, sqstest.TopicOptions{Prefix: "quirk-pb"}, sqstest.SubscribeOptions{Raw: true})
			var entries []snstypes.PublishBatchRequestEntry
			for i := range 10 {
				entries = append(entries, snstypes.PublishBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), Message: aws.String("m")})
			}
			out, err := f.sns.PublishBatch(t.Context(), &sns.PublishBatchInput{TopicArn: &f.topic.ARN, PublishBatchRequestEntries: entries})
			return outcome(err, func() string { return fmt.Sprintf("%d successful, %d failed", len(out.Successful), len(out.Failed)) })
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "fails: HTTP 400 AWS.SimpleNotificationService.TooManyEntriesInBatchRequest",
			sqstest.KindFauxqs: "10 successful, 0 failed",
			sqstest.KindOther:  "10 successful, 0 failed",
		},
	},
}

// TestSNSQuirks (GoAws, fauxqs, or the servers AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_SNS
// name) checks what TESTING.md says about each server's SNS against the AWS documentation.
// Topics and queues are made one at a time, between probes.
func TestSNSQuirks(t *testing.T) {
	for _, q := range snsQuirks {
		t.Run(q.name, func(t *testing.T) {
			got := q.probe(t)
			want, ok := q.want[srv.Kind]
			if !ok {
				t.Logf("on %s: %s (not asserted)", srv.Kind, got)
				return
			}
			if got != want {
				t.Errorf("on %s: %s, want %s", srv.Kind, got, want)
			}
		})
	}
	if err := srv.Alive(); err != nil {
		t.Fatal(err)
	}
}

// fanout is a topic with queues subscribed to it.
type fanout struct {
	sns    *sns.Client
	topic  *sqstest.Topic
	queues []*sqstest.Queue
}

func newFanout(t *testing.T, to sqstest.TopicOptions, subs ...sqstest.SubscribeOptions) *fanout {
	t.Helper()
	c, err := srv.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f := &fanout{sns: c, topic: srv.CreateTopic(t, to)}
	for _, o := range subs {
		q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-sub", FIFO: to.FIFO})
		srv.Subscribe(t, f.topic, q, o)
		f.queues = append(f.queues, q)
	}
	return f
}

// publish publishes body with an event_id attribute and returns the SNS MessageId.
func (f *fanout) publish(t *testing.T, body, subject string) string {
	t.Helper()
	in := &sns.PublishInput{TopicArn: &f.topic.ARN, Message: aws.String(body),
		MessageAttributes: map[string]snstypes.MessageAttributeValue{"event_id": {DataType: aws.String("String"), StringValue: aws.String("e1")}}}
	if subject != "" {
		in.Subject = aws.String(subject)
	}
	out, err := f.sns.Publish(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

func (f *fanout) publishAttrs(t *testing.T, body string, attrs map[string]snstypes.MessageAttributeValue) {
	t.Helper()
	if _, err := f.sns.Publish(t.Context(), &sns.PublishInput{TopicArn: &f.topic.ARN, Message: aws.String(body), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
}

// typedAttributes are one attribute of each type SNS has: event_id (String), n (Number) and
// bin (Binary, the bytes 00 01 ff).
func typedAttributes() map[string]snstypes.MessageAttributeValue {
	return map[string]snstypes.MessageAttributeValue{
		"event_id": {DataType: aws.String("String"), StringValue: aws.String("e1")},
		"n":        {DataType: aws.String("Number"), StringValue: aws.String("42.5")},
		"bin":      {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 0xff}},
	}
}

// receive returns the one message that queue i holds.
func (f *fanout) receive(t *testing.T, i int) types.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &f.queues[i].URL,
			MaxNumberOfMessages: 1, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			return out.Messages[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %d: no message 10 s after the publish", i)
		}
	}
}

// envelope returns the body of the one message queue i holds, as a JSON object.
func (f *fanout) envelope(t *testing.T, i int) map[string]any {
	t.Helper()
	m := f.receive(t, i)
	var env map[string]any
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
		t.Fatalf("body %q is no JSON object: %v", aws.ToString(m.Body), err)
	}
	return env
}

// isMillis reports whether ts has the form SNS uses: 2012-04-25T21:49:25.719Z.
func isMillis(ts string) bool {
	_, err := time.Parse("2006-01-02T15:04:05.000Z", ts)
	return err == nil
}

package sqstest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// quirk is one behaviour of an SQS server that the harness or the tests allow for. probe makes
// the server show it and says what happened in a few words; want says what each kind of server
// does (for KindOther, what AWS does). A kind missing from want is logged, not asserted.
type quirk struct {
	name  string
	probe func(t *testing.T) string
	want  map[sqstest.Kind]string
}

// TestServerQuirks (GoAws, fauxqs, or the server AWS_ENDPOINT_URL_SQS names) checks on the server
// the tests run against each quirk that TESTING.md lists for it, so that the list stays true when
// a server's version changes. Queues are made one at a time, between probes (GoAws crashes when a
// queue is created under traffic).
func TestServerQuirks(t *testing.T) {
	for _, q := range quirks {
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

var quirks = []quirk{
	{
		// Count reads only ApproximateNumberOfMessages on GoAws, and adds NotVisible elsewhere.
		name: "in-flight messages in ApproximateNumberOfMessages",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-count"})
			sendN(t, q.URL, 2)
			receive(t, q.URL, 1)
			a := attrs(t, q.URL, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
			return fmt.Sprintf("visible %s, not visible %s", a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"])
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "visible 2, not visible 1",
			sqstest.KindFauxqs: "visible 1, not visible 1",
		},
	},
	{
		// The worker counts deliveries from ApproximateReceiveCount; tests of redelivery counts
		// cannot run on GoAws.
		name: "ApproximateReceiveCount on the second receive",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-rc"})
			sendN(t, q.URL, 1)
			release(t, q.URL, receive(t, q.URL, 1))
			m := receive(t, q.URL, 1)
			return "count " + m[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "count 1", sqstest.KindFauxqs: "count 2", sqstest.KindOther: "count 2"},
	},
	{
		// Send checks only the call's error and Failed, never Successful.
		name: "SendMessageBatch results",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-batch"})
			out, err := srv.Client().SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: &q.URL,
				Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String("a"), MessageBody: aws.String("a")}, {Id: aws.String("b"), MessageBody: aws.String("b")}}})
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%d successful, %d failed", len(out.Successful), len(out.Failed))
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "0 successful, 0 failed", sqstest.KindFauxqs: "2 successful, 0 failed", sqstest.KindOther: "2 successful, 0 failed"},
	},
	{
		// The worker falls back to single ChangeMessageVisibility calls when the batch call fails.
		name: "ChangeMessageVisibilityBatch",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-cmvb"})
			sendN(t, q.URL, 1)
			m := receive(t, q.URL, 1)
			out, err := srv.Client().ChangeMessageVisibilityBatch(t.Context(), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.URL,
				Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 60}}})
			return outcome(err, func() string { return fmt.Sprintf("%d successful", len(out.Successful)) })
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "fails: HTTP 400, not deserialisable", sqstest.KindFauxqs: "1 successful", sqstest.KindOther: "1 successful"},
	},
	{
		// The worker takes "not found" on a delete as "already gone".
		name: "DeleteMessage with a used receipt handle",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-stale"})
			sendN(t, q.URL, 1)
			m := receive(t, q.URL, 1)
			del := &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m[0].ReceiptHandle}
			if _, err := srv.Client().DeleteMessage(t.Context(), del); err != nil {
				t.Fatal(err)
			}
			_, err := srv.Client().DeleteMessage(t.Context(), del)
			return outcome(err, func() string { return "succeeds" })
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "fails: HTTP 404 AWS.SimpleQueueService.QueueExists", sqstest.KindFauxqs: "succeeds", sqstest.KindOther: "succeeds"},
	},
	{
		// So a test cannot make fauxqs refuse a delete; refused deletes are tested on the fake.
		name: "DeleteMessage with a garbage receipt handle",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-garbage"})
			_, err := srv.Client().DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: aws.String("garbage")})
			return outcome(err, func() string { return "succeeds" })
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "fails: HTTP 404 AWS.SimpleQueueService.QueueExists", sqstest.KindFauxqs: "succeeds", sqstest.KindOther: "fails: HTTP 400 ReceiptHandleIsInvalid"},
	},
	{
		// The worker and the CLI read maxReceiveCount as a number or a string.
		name: "RedrivePolicy maxReceiveCount set as a number",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-rp", MaxReceiveCount: 3})
			policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, attrs(t, q.DLQURL, types.QueueAttributeNameQueueArn)["QueueArn"])
			out, err := srv.Client().CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(q.Name + "-n"),
				Attributes: map[string]string{"RedrivePolicy": policy}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // the harness's queues are its own to delete; this one is the test's
				_, _ = srv.Client().DeleteQueue(context.WithoutCancel(t.Context()), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			})
			var rp map[string]any
			if err := json.Unmarshal([]byte(attrs(t, *out.QueueUrl, types.QueueAttributeNameRedrivePolicy)["RedrivePolicy"]), &rp); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("read back as %T", rp["maxReceiveCount"])
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "read back as string", sqstest.KindFauxqs: "read back as float64", sqstest.KindOther: "read back as float64"},
	},
	{
		// Redrive works on both; a test must not assert the count of a message in the DLQ.
		name: "ApproximateReceiveCount in the DLQ after maxReceiveCount 2",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-dlq", MaxReceiveCount: 2})
			sendN(t, q.URL, 1)
			var m []types.Message
			deadline := time.Now().Add(30 * time.Second)
			for len(m) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the message never reached the DLQ")
				}
				release(t, q.URL, receiveOnce(t, q.URL)) // each receive counts; the one after the second moves it
				m = receiveOnce(t, q.DLQURL)
			}
			return "count " + m[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "count 1", sqstest.KindFauxqs: "count 4"},
	},
	{
		// A test that needs another consumer to meet a redelivered message soon must not have a
		// backlog in front of it on fauxqs (harness/reliability's frozen claim holder does).
		name: "order of a message visible again behind a backlog",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-order"})
			sendN(t, q.URL, 5)
			sqstest.WaitCount(t, srv.Client(), q.URL, 5, 10*time.Second)
			first := receive(t, q.URL, 1)
			release(t, q.URL, first)
			var order []string
			deadline := time.Now().Add(10 * time.Second)
			for len(order) < 5 && time.Now().Before(deadline) {
				for _, m := range receiveOnce(t, q.URL) {
					order = append(order, aws.ToString(m.Body))
				}
			}
			return fmt.Sprintf("first received %s; then %v", aws.ToString(first[0].Body), order)
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "first received 0; then [0 1 2 3 4]", sqstest.KindFauxqs: "first received 0; then [1 2 3 4 0]"},
	},
	{
		// Tests of messages held behind a running group head run on the fake only.
		name: "FIFO receive of three messages of one group",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-fifo", FIFO: true})
			var msgs []sqstest.Message
			for i := range 3 {
				msgs = append(msgs, sqstest.Message{Body: strconv.Itoa(i), GroupID: "g", DedupID: strconv.Itoa(i)})
			}
			if err := sqstest.Send(t.Context(), srv.Client(), q.URL, msgs); err != nil {
				t.Fatal(err)
			}
			sqstest.WaitCount(t, srv.Client(), q.URL, 3, 10*time.Second)
			return fmt.Sprintf("%d messages", len(receiveOnce(t, q.URL)))
		},
		want: map[sqstest.Kind]string{sqstest.KindFauxqs: "1 messages"},
	},
	{
		// A fair queue is a standard queue whose producer sets MessageGroupId: SQS keeps the id
		// and returns it on receive (MessageSystemAttributeNames MessageGroupId or All). The
		// worker's per-group tests (Config.MaxPerGroup) run where it is returned: the fake, AWS.
		name: "MessageGroupId on a standard queue",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-fair"})
			err := sqstest.Send(t.Context(), srv.Client(), q.URL, []sqstest.Message{{Body: "0", GroupID: "tenant-a"}})
			if err != nil {
				return "send fails: " + kindOfError(err)
			}
			m := receive(t, q.URL, 1)
			g, ok := m[0].Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			if !ok {
				return "send succeeds; receive returns no MessageGroupId"
			}
			return "send succeeds; receive returns MessageGroupId " + g
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "send succeeds; receive returns no MessageGroupId",
			sqstest.KindFauxqs: "send succeeds; receive returns no MessageGroupId",
			sqstest.KindOther:  "send succeeds; receive returns MessageGroupId tenant-a",
		},
	},
	{
		// The CLI's redrive falls back to copying message by message.
		name: "StartMessageMoveTask",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-move", MaxReceiveCount: 1})
			arn := attrs(t, q.DLQURL, types.QueueAttributeNameQueueArn)["QueueArn"]
			_, err := srv.Client().StartMessageMoveTask(t.Context(), &sqs.StartMessageMoveTaskInput{SourceArn: &arn})
			return outcome(err, func() string { return "succeeds" })
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "fails: HTTP 400, not deserialisable", sqstest.KindFauxqs: "fails: HTTP 400 InvalidAction", sqstest.KindOther: "succeeds"},
	},
	{
		name: "ListDeadLetterSourceQueues",
		probe: func(t *testing.T) string {
			q := newQueue(t, sqstest.QueueOptions{Prefix: "quirk-sources", MaxReceiveCount: 1})
			out, err := srv.Client().ListDeadLetterSourceQueues(t.Context(), &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: &q.DLQURL})
			return outcome(err, func() string { return fmt.Sprintf("%d queues", len(out.QueueUrls)) })
		},
		want: map[sqstest.Kind]string{sqstest.KindGoAws: "fails: HTTP 400, not deserialisable", sqstest.KindFauxqs: "fails: HTTP 400 InvalidAction", sqstest.KindOther: "1 queues"},
	},
	{
		// Code that branches on SQS errors matches the error code string, not the SDK's types.
		name: "GetQueueUrl of a missing queue",
		probe: func(t *testing.T) string {
			_, err := srv.Client().GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String("quirk-missing-" + strconv.FormatInt(time.Now().UnixNano(), 36))})
			var typed *types.QueueDoesNotExist
			return fmt.Sprintf("%s, typed %t", kindOfError(err), errors.As(err, &typed))
		},
		want: map[sqstest.Kind]string{
			sqstest.KindGoAws:  "HTTP 400 AWS.SimpleQueueService.NonExistentQueue, typed false",
			sqstest.KindFauxqs: "HTTP 400 AWS.SimpleQueueService.NonExistentQueue, typed true",
		},
	},
}

func newQueue(t *testing.T, o sqstest.QueueOptions) *sqstest.Queue {
	t.Helper()
	return srv.CreateQueue(t, o)
}

func sendN(t *testing.T, url string, n int) {
	t.Helper()
	msgs := make([]sqstest.Message, n)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: strconv.Itoa(i)}
	}
	if err := sqstest.Send(t.Context(), srv.Client(), url, msgs); err != nil {
		t.Fatal(err)
	}
}

// receiveOnce makes one short-polling receive of up to ten messages.
func receiveOnce(t *testing.T, url string) []types.Message {
	t.Helper()
	out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

// receive polls until it has received n messages at once (a short poll may return fewer).
func receive(t *testing.T, url string, n int32) []types.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: n,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == int(n) {
			return out.Messages
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d messages, want %d", len(out.Messages), n)
		}
	}
}

// release makes received messages visible again at once. (A receive's own VisibilityTimeout
// cannot be 0: the SDK leaves a zero out of the request.)
func release(t *testing.T, url string, msgs []types.Message) {
	t.Helper()
	for _, m := range msgs {
		if _, err := srv.Client().ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url,
			ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
}

func attrs(t *testing.T, url string, names ...types.QueueAttributeName) map[string]string {
	t.Helper()
	out, err := srv.Client().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes
}

// outcome says how a call went: "fails: " and what it got back, or what ok says.
func outcome(err error, ok func() string) string {
	if err != nil {
		return "fails: " + kindOfError(err)
	}
	return ok()
}

// kindOfError says what a failed call got back: the HTTP status and the API error code, or that
// the SDK could not read the answer (GoAws answers what it lacks with plain text).
func kindOfError(err error) string {
	if err == nil {
		return "no error"
	}
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) {
		return err.Error()
	}
	var ae smithy.APIError
	var de *smithy.DeserializationError
	switch {
	case errors.As(err, &de):
		return fmt.Sprintf("HTTP %d, not deserialisable", re.HTTPStatusCode())
	case errors.As(err, &ae):
		return fmt.Sprintf("HTTP %d %s", re.HTTPStatusCode(), ae.ErrorCode())
	}
	return fmt.Sprintf("HTTP %d", re.HTTPStatusCode())
}

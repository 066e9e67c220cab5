package reqcount_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/reqcount"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

var srv *sqstest.Server

// TestMain starts the SQS server the harness picks (GoAws by default, fauxqs with
// SQSINBOX_TEST_SQS=fauxqs).
func TestMain(m *testing.M) { sqstest.Main(m, &srv) }

// TestCounts sends, receives (one full, one empty) and deletes through a counting client on a
// real SQS server and checks each action's count and the empty receive.
func TestCounts(t *testing.T) {
	ctx := context.Background()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "reqcount"})
	rc := reqcount.NewTransport(4)
	c, err := srv.NewClient(ctx, func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(`{"id":"a"}`)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(out.Messages))
	}
	if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q.URL,
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: out.Messages[0].ReceiptHandle}}}); err != nil {
		t.Fatal(err)
	}
	if out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("the second receive returned %d messages, want 0", len(out.Messages))
	}
	got := rc.Snapshot()
	want := map[string]int64{"SendMessage": 1, "ReceiveMessage": 2, "DeleteMessageBatch": 1}
	for k, n := range want {
		if got.By[k] != n {
			t.Errorf("%s: counted %d, want %d (all: %v)", k, got.By[k], n, got.By)
		}
	}
	if got.Total() != 4 || got.EmptyReceives != 1 {
		t.Errorf("total %d, empty receives %d; want 4 and 1 (all: %v)", got.Total(), got.EmptyReceives, got.By)
	}
	if d := got.Sub(reqcount.Counts{By: map[string]int64{"ReceiveMessage": 1}}); d.By["ReceiveMessage"] != 1 {
		t.Errorf("Sub: %v", d.By)
	}
}

package reqcount_test

import (
	"context"
	"net/http/httptest"
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
	rc := reqcount.NewTransport(4)
	c, err := srv.NewClient(ctx, func(o *sqs.Options) { o.HTTPClient = rc })
	if err != nil {
		t.Fatal(err)
	}
	got := sendReceiveDelete(t, c, "reqcount", rc, true)
	if d := got.Sub(reqcount.Counts{By: map[string]int64{"ReceiveMessage": 1}}); d.By["ReceiveMessage"] != 1 {
		t.Errorf("Sub: %v", d.By)
	}
}

// TestProxyCounts does the same through Proxy in front of a real SQS server (the harness's),
// with an SDK client whose own HTTP client counts nothing: the proxy counts each request and the
// empty receive, and passes the answers through whole (the message's body and receipt handle,
// which the delete needs).
func TestProxyCounts(t *testing.T) {
	ctx := context.Background()
	rc := reqcount.NewTransport(4)
	h, err := rc.Proxy(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(h)
	defer px.Close()
	c, err := srv.NewClient(ctx, func(o *sqs.Options) { o.BaseEndpoint = aws.String(px.URL) })
	if err != nil {
		t.Fatal(err)
	}
	sendReceiveDelete(t, c, "reqproxy", rc, false)
	if _, err := rc.Proxy("127.0.0.1:4100"); err == nil {
		t.Error("Proxy took a target without a scheme")
	}
}

// sendReceiveDelete sends a message to a new queue through c, receives it, deletes it (with
// DeleteMessageBatch when batch is set, else DeleteMessage), receives again (nothing), and checks
// what rc counted: one send, two receives (one empty), one delete. It returns the counts.
func sendReceiveDelete(t *testing.T, c *sqs.Client, prefix string, rc *reqcount.Client, batch bool) reqcount.Counts {
	t.Helper()
	ctx := context.Background()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix})
	body := `{"id":"` + prefix + `"}`
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body {
		t.Fatalf("received %+v, want the one message sent", out.Messages)
	}
	deleteAction := "DeleteMessage"
	if batch {
		deleteAction = "DeleteMessageBatch"
		_, err = c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &q.URL,
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: out.Messages[0].ReceiptHandle}}})
	} else {
		_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: out.Messages[0].ReceiptHandle})
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("the second receive returned %d messages, want 0: the delete did not take", len(out.Messages))
	}
	got := rc.Snapshot()
	want := map[string]int64{"SendMessage": 1, "ReceiveMessage": 2, deleteAction: 1}
	for k, n := range want {
		if got.By[k] != n {
			t.Errorf("%s: counted %d, want %d (all: %v)", k, got.By[k], n, got.By)
		}
	}
	if got.Total() != 4 || got.EmptyReceives != 1 {
		t.Errorf("total %d, empty receives %d; want 4 and 1 (all: %v)", got.Total(), got.EmptyReceives, got.By)
	}
	return got
}

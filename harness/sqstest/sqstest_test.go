package sqstest_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

var srv *sqstest.Server

func TestMain(m *testing.M) { sqstest.Main(m, &srv) }

// TestQueues (the pass's SQS server, or the server AWS_ENDPOINT_URL_SQS names): queues with a DLQ, sends in
// batches and counts.
func TestQueues(t *testing.T) {
	ctx := context.Background()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "harness", MaxReceiveCount: 3, Retention: time.Hour})
	if q.DLQURL == "" {
		t.Fatal("no DLQ")
	}
	c := srv.Client()
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q.URL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Attributes["RedrivePolicy"] == "" || attrs.Attributes["MessageRetentionPeriod"] != "3600" {
		t.Errorf("attributes %v", attrs.Attributes)
	}
	var msgs []sqstest.Message
	for i := range 25 {
		msgs = append(msgs, sqstest.Message{Body: strconv.Itoa(i), Attributes: map[string]string{"event_id": strconv.Itoa(i)}})
	}
	if err := sqstest.Send(ctx, c, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	if n, err := sqstest.Count(ctx, c, q.URL); err != nil || n != 25 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 1, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if v := out.Messages[0].MessageAttributes["event_id"].StringValue; aws.ToString(v) != aws.ToString(out.Messages[0].Body) {
		t.Errorf("attribute %q, body %q", aws.ToString(v), aws.ToString(out.Messages[0].Body))
	}
	if n, _ := sqstest.Count(ctx, c, q.URL); n != 25 {
		t.Errorf("Count with one in flight = %d, want 25", n)
	}
	if err := srv.Alive(); err != nil {
		t.Fatal(err)
	}
}

// TestKind: the server's kind shows in both of its fields and in the environment that child
// processes inherit, and an unknown SQSINBOX_TEST_SQS is refused.
func TestKind(t *testing.T) {
	if srv.GoAws != (srv.Kind == sqstest.KindGoAws) {
		t.Errorf("Kind %s, GoAws %t", srv.Kind, srv.GoAws)
	}
	if got := os.Getenv("SQSINBOX_TEST_GOAWS") == "1"; got != srv.GoAws {
		t.Errorf("SQSINBOX_TEST_GOAWS=%q on %s", os.Getenv("SQSINBOX_TEST_GOAWS"), srv.Kind)
	}
	if got := os.Getenv(sqstest.EnvServer); srv.Kind != sqstest.KindOther && got != string(srv.Kind) {
		t.Errorf("%s=%q on %s", sqstest.EnvServer, got, srv.Kind)
	}
	t.Setenv(sqstest.EnvServer, "goas")
	if s, err := sqstest.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "want goaws or fauxqs") {
		if s != nil {
			s.Close()
		}
		t.Errorf("Start with %s=goas: %v", sqstest.EnvServer, err)
	}
}

package sqsfake_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// The fake is the stand-in for SQS in the fault tests, so its own rules are tested here.

func send(t *testing.T, f *sqsfake.Fake, url string, bodies []string, group string) {
	t.Helper()
	for _, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(b)}
		if group != "" {
			in.MessageGroupId = aws.String(group)
		}
		if _, err := f.SendMessage(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
}

func receive(t *testing.T, f *sqsfake.Fake, url string, max int32, vis int32) []types.Message {
	t.Helper()
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: max, VisibilityTimeout: vis})
	if err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestReceiveCountsAndRedrive(t *testing.T) {
	f := sqsfake.New()
	dlq := f.CreateQueue(sqsfake.QueueOptions{Name: "dlq"})
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q", DeadLetterQueue: dlq, MaxReceiveCount: 2})
	send(t, f, url, []string{"a"}, "")
	for want := 1; want <= 2; want++ {
		ms := receive(t, f, url, 10, 0)
		if len(ms) != 1 || ms[0].Attributes["ApproximateReceiveCount"] != string(rune('0'+want)) {
			t.Fatalf("receive %d: %+v", want, ms)
		}
		if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: ms[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	if ms := receive(t, f, url, 10, 0); len(ms) != 0 {
		t.Fatalf("third receive got %d messages; want the message moved to the DLQ", len(ms))
	}
	if f.Len(dlq) != 1 || f.Len(url) != 0 {
		t.Fatalf("dlq %d, queue %d", f.Len(dlq), f.Len(url))
	}
}

func TestFIFOGroupLocking(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q.fifo"})
	send(t, f, url, []string{"a1", "a2"}, "a")
	send(t, f, url, []string{"b1"}, "b")
	first := receive(t, f, url, 1, 0)
	if len(first) != 1 || *first[0].Body != "a1" {
		t.Fatalf("first receive %+v", first)
	}
	// Group a is locked while a1 is in flight: only b1 comes.
	if ms := receive(t, f, url, 10, 0); len(ms) != 1 || *ms[0].Body != "b1" {
		t.Fatalf("second receive %+v, want only b1", ms)
	}
	if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if ms := receive(t, f, url, 10, 0); len(ms) != 1 || *ms[0].Body != "a2" {
		t.Fatalf("third receive %+v, want a2", ms)
	}
}

func TestStaleHandles(t *testing.T) {
	for _, name := range []string{"std", "q.fifo"} {
		t.Run(name, func(t *testing.T) {
			f := sqsfake.New()
			url := f.CreateQueue(sqsfake.QueueOptions{Name: name})
			send(t, f, url, []string{"a"}, "g")
			old := receive(t, f, url, 1, 0)[0].ReceiptHandle
			if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: old}); err != nil {
				t.Fatal(err)
			}
			receive(t, f, url, 1, 0) // a new delivery: old is stale now
			_, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: old})
			if name == "std" && (err != nil || f.Len(url) != 1) {
				t.Errorf("standard: stale delete = %v with %d left; want success without deleting", err, f.Len(url))
			}
			if name != "std" && err == nil {
				t.Error("FIFO: stale delete succeeded")
			}
			_, err = f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: old, VisibilityTimeout: 5})
			if code(err) != "ReceiptHandleIsInvalid" {
				t.Errorf("stale visibility change = %v", err)
			}
		})
	}
}

func TestTwelveHourCap(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q"})
	send(t, f, url, []string{"a"}, "")
	h := receive(t, f, url, 1, 0)[0].ReceiptHandle
	f.AgeReceive(url, 12*time.Hour-time.Minute)
	ok := &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: h, VisibilityTimeout: 30}
	if _, err := f.ChangeMessageVisibility(context.Background(), ok); err != nil {
		t.Fatalf("within the cap: %v", err)
	}
	past := &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: h, VisibilityTimeout: 120}
	if _, err := f.ChangeMessageVisibility(context.Background(), past); code(err) != "InvalidParameterValue" {
		t.Fatalf("past the cap: %v", err)
	}
	if len(f.Violations()) != 1 {
		t.Errorf("violations %v", f.Violations())
	}
}

// TestTwelveHourCapPerReceive: the cap counts from each receive. A message first received 13
// hours ago, received again now, can be made invisible for hours.
func TestTwelveHourCapPerReceive(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q"})
	send(t, f, url, []string{"a"}, "")
	f.AgeFirstReceive(url, 13*time.Hour)
	m := receive(t, f, url, 1, 0)[0]
	first, _ := strconv.ParseInt(m.Attributes["ApproximateFirstReceiveTimestamp"], 10, 64)
	if age := time.Since(time.UnixMilli(first)); age < 13*time.Hour {
		t.Fatalf("first receive %v ago, want 13 h", age)
	}
	in := &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 6 * 3600}
	if _, err := f.ChangeMessageVisibility(context.Background(), in); err != nil {
		t.Fatalf("6 h on a fresh receive of an old message: %v", err)
	}
	if v := f.Violations(); len(v) > 0 {
		t.Errorf("violations %v", v)
	}
}

func TestLongPollWakesOnSend(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q"})
	got := make(chan int)
	go func() {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 20})
		if err != nil {
			got <- -1
			return
		}
		got <- len(out.Messages)
	}()
	for f.Calls("ReceiveMessage") == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	send(t, f, url, []string{"a"}, "")
	if n := <-got; n != 1 {
		t.Fatalf("long poll returned %d messages", n)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("long poll woke after %v", el)
	}
}

func TestPartialDeleteAndFaults(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q"})
	send(t, f, url, []string{"a", "b"}, "")
	ms := receive(t, f, url, 10, 0)
	f.SetFaults(sqsfake.Faults{DeleteEntry: func(h string) string {
		if h == *ms[0].ReceiptHandle {
			return "InternalError"
		}
		return ""
	}})
	out, err := f.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("0"), ReceiptHandle: ms[0].ReceiptHandle}, {Id: aws.String("1"), ReceiptHandle: ms[1].ReceiptHandle}}})
	if err != nil || len(out.Failed) != 1 || *out.Failed[0].Id != "0" || len(out.Successful) != 1 {
		t.Fatalf("batch = %+v, %v", out, err)
	}
	f.SetFaults(sqsfake.Faults{Before: func(op string, _ any) error { return sqsfake.Throttled }})
	if _, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url}); code(err) != "ThrottlingException" {
		t.Fatalf("receive = %v", err)
	}
}

// TestLoseReceive: a lost receive leaves its messages in flight, with nobody holding them, until
// their visibility timeout ends.
func TestLoseReceive(t *testing.T) {
	f := sqsfake.New()
	url := f.CreateQueue(sqsfake.QueueOptions{Name: "q", VisibilityTimeout: time.Second})
	send(t, f, url, []string{"a"}, "")
	lost := true
	f.SetFaults(sqsfake.Faults{LoseReceive: func() bool { l := lost; lost = false; return l }})
	if _, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1}); code(err) != "RequestTimeout" {
		t.Fatalf("lost receive: %v", err)
	}
	if m := f.Messages(url)[0]; !m.InFlight || m.ReceiveCount != 1 {
		t.Fatalf("after a lost receive: %+v, want in flight, received once", m)
	}
	// A long poll returns the message once its visibility timeout has ended.
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1, WaitTimeSeconds: 5})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("after the visibility timeout: %v, %v", out, err)
	}
	if n := out.Messages[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("receive count %s, want 2 (the lost receive counted)", n)
	}
}

// TestFairQueue: a standard queue keeps MessageGroupId and returns it only when asked for; with
// Fair, a group holding 30 or more of the messages in flight (and over 10%) is noisy, and a
// quiet group's message sent after its backlog comes first. Without Fair it waits its turn.
func TestFairQueue(t *testing.T) {
	for _, fair := range []bool{false, true} {
		f := sqsfake.New()
		url := f.CreateQueue(sqsfake.QueueOptions{Name: "fair", Fair: fair})
		var backlog []string
		for i := range 100 {
			backlog = append(backlog, "a"+strconv.Itoa(i))
		}
		send(t, f, url, backlog, "a")
		if got := receive(t, f, url, 10, 30); got[0].Attributes["MessageGroupId"] != "" {
			t.Fatalf("MessageGroupId returned unasked: %v", got[0].Attributes)
		}
		for range 3 { // 40 of a's in flight in all
			receive(t, f, url, 10, 30)
		}
		send(t, f, url, []string{"b0"}, "b")
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1, VisibilityTimeout: 30,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
		if err != nil {
			t.Fatal(err)
		}
		body, group := aws.ToString(out.Messages[0].Body), out.Messages[0].Attributes["MessageGroupId"]
		want := "a40"
		if fair {
			want = "b0"
		}
		if body != want || group != want[:1] {
			t.Errorf("fair %v: received %s of group %q; want %s of its group", fair, body, group, want)
		}
	}
}

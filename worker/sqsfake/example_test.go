package sqsfake_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// A queue with a dead-letter queue: a message received twice without being deleted moves there on
// the next receive.
func Example() {
	ctx := context.Background()
	f := sqsfake.New()
	dlq := f.CreateQueue(sqsfake.QueueOptions{Name: "orders-dlq"})
	q := f.CreateQueue(sqsfake.QueueOptions{Name: "orders", DeadLetterQueue: dlq, MaxReceiveCount: 2})
	_, _ = f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(`{"id":"evt_1"}`)})
	for range 3 {
		out, _ := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), VisibilityTimeout: 0})
		for _, m := range out.Messages {
			fmt.Println("received, count", m.Attributes["ApproximateReceiveCount"])
			// Not deleted: make it visible again at once, as a failed handler's retry would.
			_, _ = f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q),
				ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		}
	}
	fmt.Println("in the queue:", f.Len(q), "in the DLQ:", f.Len(dlq))
	// Output:
	// received, count 1
	// received, count 2
	// in the queue: 0 in the DLQ: 1
}

// Throttling every DeleteMessageBatch call, and counting the calls.
func ExampleFaults() {
	ctx := context.Background()
	f := sqsfake.New()
	q := f.CreateQueue(sqsfake.QueueOptions{Name: "orders"})
	f.SetFaults(sqsfake.Faults{Before: func(op string, _ any) error {
		if op == "DeleteMessageBatch" {
			return sqsfake.Throttled
		}
		return nil
	}})
	_, err := f.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q)})
	fmt.Println(err, "- calls:", f.Calls("DeleteMessageBatch"))
	// Output: api error ThrottlingException: Rate exceeded - calls: 1
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

func runRedrive(ctx context.Context, e env, args []string) error {
	fs := newFlags(e, "redrive", "redrive --from DLQ [--to QUEUE] [flags]",
		"  sqsinbox redrive --from warehouse-dlq --to warehouse\n"+
			"  sqsinbox redrive --from warehouse-dlq --to warehouse --mode copy --max 100\n\n"+
			"The move task (StartMessageMoveTask) is used where the server supports it, else each message\n"+
			"is received from the DLQ, sent to the queue with its body and attributes, then deleted.\n"+
			"The event key (the event_id attribute or the body) survives; the SQS MessageId does not.\n"+
			"A message the worker already processed is a duplicate on its return: the inbox deletes it.\n\n"+
			"A copy is a new message: its retention period starts again when it is sent, so it can be\n"+
			"delivered up to the queue's MessageRetentionPeriod after the copy, later than the original\n"+
			"could have been. Keep the inbox's retention (purge --older-than) above the time since the\n"+
			"events were first sent plus that period, or a copy of a purged event runs again.")
	from := fs.String("from", "", "the dead-letter queue, by name or URL (required)")
	to := fs.String("to", "", "the queue to move messages to, by name or URL (required in copy mode; the move task defaults to each message's source)")
	mode := fs.String("mode", "auto", "auto (move task, else copy), move-task, or copy")
	maxN := fs.Int("max", 0, "copy mode: move at most this many messages (0: until the DLQ is empty)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if *from == "" {
		return fmt.Errorf("%w: --from is required", errUsage)
	}
	if *mode != "auto" && *mode != "move-task" && *mode != "copy" {
		return fmt.Errorf("%w: --mode %q: want auto, move-task or copy", errUsage, *mode)
	}
	if *mode == "copy" && *to == "" {
		return fmt.Errorf("%w: --mode copy needs --to", errUsage)
	}
	c, err := sqsClient(ctx, fs.timeout)
	if err != nil {
		return err
	}
	fromURL, err := queueURL(ctx, c, *from)
	if err != nil {
		return err
	}
	toURL := ""
	if *to != "" {
		if toURL, err = queueURL(ctx, c, *to); err != nil {
			return err
		}
	}
	if *mode != "copy" {
		err := moveTask(ctx, e, c, fromURL, toURL)
		switch {
		case err == nil:
			return nil
		case !unsupported(err):
			return fmt.Errorf("move task: %s", apiError(err))
		case *mode == "move-task":
			return fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
				"use --mode copy (with --to), or --mode auto to fall back to it", sqsEndpoint(c))
		case toURL == "":
			return fmt.Errorf("the SQS server at %s does not support message move tasks (StartMessageMoveTask); "+
				"give --to to copy message by message instead", sqsEndpoint(c))
		}
		fmt.Fprintf(e.stderr, "the SQS server has no message move tasks (StartMessageMoveTask); copying message by message\n")
	}
	return copyMessages(ctx, e, c, fromURL, toURL, *maxN)
}

// unsupported tells "this server does not have the API" from a real failure.
func unsupported(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "InvalidAction", "UnsupportedOperation", "UnknownOperationException", "InvalidParameterValue", "NotImplemented":
			return true
		}
	}
	// GoAws answers an unknown action with plain text, which the SDK cannot deserialise.
	var de *smithy.DeserializationError
	return errors.As(err, &de)
}

func moveTask(ctx context.Context, e env, c *sqs.Client, fromURL, toURL string) error {
	attrs, err := attributes(ctx, c, fromURL)
	if err != nil {
		return err
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(attrs["QueueArn"])}
	if toURL != "" {
		ta, err := attributes(ctx, c, toURL)
		if err != nil {
			return err
		}
		in.DestinationArn = aws.String(ta["QueueArn"])
	}
	out, err := c.StartMessageMoveTask(ctx, in)
	if err != nil {
		return err
	}
	handle := aws.ToString(out.TaskHandle)
	p := newProgress(e.stderr)
	defer p.done()
	for {
		lt, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: in.SourceArn, MaxResults: aws.Int32(1)})
		if err != nil {
			if ctx.Err() != nil {
				// Stop the server-side task too: what moved stays moved, the rest stays in the DLQ.
				_, cerr := c.CancelMessageMoveTask(context.WithoutCancel(ctx), &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
				return errors.Join(ctx.Err(), cerr)
			}
			return fmt.Errorf("list move tasks: %s", apiError(err))
		}
		if len(lt.Results) > 0 {
			r := lt.Results[0]
			moved, total := r.ApproximateNumberOfMessagesMoved, aws.ToInt64(r.ApproximateNumberOfMessagesToMove)
			p.update("move task %s: %d of %d moved", aws.ToString(r.Status), moved, total)
			switch aws.ToString(r.Status) {
			case "COMPLETED":
				p.done()
				fmt.Fprintf(e.stdout, "moved %s from %s (move task)\n", plural(int(moved), "message"), lastPart(fromURL))
				return nil
			case "FAILED", "CANCELLED":
				return fmt.Errorf("move task %s after %d messages: %s", aws.ToString(r.Status), moved, aws.ToString(r.FailureReason))
			}
		}
		if err := sleepUntil(ctx, time.Now().Add(time.Second)); err != nil {
			_, cerr := c.CancelMessageMoveTask(context.WithoutCancel(ctx), &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
			return errors.Join(err, cerr)
		}
	}
}

// copyMessages moves messages one receive batch at a time: send to the queue, then delete from
// the DLQ. An interrupt lets the batch in hand finish, so no message is sent without its delete
// being attempted. If a delete fails after the send, the message is in both queues; the next
// redrive sends it again and the inbox treats the second copy as a duplicate.
func copyMessages(ctx context.Context, e env, c *sqs.Client, fromURL, toURL string, maxN int) error {
	p := newProgress(e.stderr)
	defer p.done()
	moved, empty := 0, 0
	fifo := len(toURL) > 5 && toURL[len(toURL)-5:] == ".fifo"
	for empty < 2 && (maxN == 0 || moved < maxN) {
		if ctx.Err() != nil {
			p.done()
			fmt.Fprintf(e.stdout, "interrupted: moved %s from %s to %s as copies: their retention period starts again\n",
				plural(moved, "message"), lastPart(fromURL), lastPart(toURL))
			return ctx.Err()
		}
		n := int32(10)
		if maxN > 0 {
			n = int32(min(10, maxN-moved))
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(fromURL),
			MaxNumberOfMessages:         n,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           60,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("receive from %s: %s", lastPart(fromURL), apiError(err))
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		// The batch in hand is finished even if an interrupt arrives now.
		bctx := context.WithoutCancel(ctx)
		for _, m := range out.Messages {
			in := &sqs.SendMessageInput{
				QueueUrl:          aws.String(toURL),
				MessageBody:       m.Body,
				MessageAttributes: m.MessageAttributes,
			}
			if fifo {
				in.MessageGroupId = aws.String(m.Attributes["MessageGroupId"])
				if d := m.Attributes["MessageDeduplicationId"]; d != "" {
					in.MessageDeduplicationId = aws.String(d)
				}
			}
			if _, err := c.SendMessage(bctx, in); err != nil {
				return fmt.Errorf("send to %s after moving %d: %s (the message stays in the DLQ)", lastPart(toURL), moved, apiError(err))
			}
			if _, err := c.DeleteMessage(bctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(fromURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return fmt.Errorf("delete from %s after sending: %s (the message is now in both queues; the inbox deduplicates it)", lastPart(fromURL), apiError(err))
			}
			moved++
			p.update("moved %d messages", moved)
		}
	}
	p.done()
	fmt.Fprintf(e.stdout, "moved %s from %s to %s as copies: their retention period starts again now\n",
		plural(moved, "message"), lastPart(fromURL), lastPart(toURL))
	return nil
}

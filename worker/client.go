package worker

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/internal/core/plainbody"
)

// SQSClient is the part of the SQS API that the worker uses. Its methods copy the signatures of
// *sqs.Client exactly, so an *sqs.Client satisfies it with no adapter, and so can a fake.
type SQSClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// PlainRequestBodies is an SQS client option that hands each request body to the HTTP client as
// a plain reader, without the WriteTo method of the SDK's own body reader.
//
// It works around a fault of aws-sdk-go-v2 (issue #2737): net/http probes a request body after
// writing it, the SDK's reader fails that probe once the SDK has closed it, and when a server
// answers quickly net/http closes the connection under the response. The SDK then retries the
// call. For ReceiveMessage the retry is not harmless: the first attempt already made up to ten
// messages invisible, nobody holds their receipt handles, and they wait out the visibility timeout.
//
// The worker passes this option on every call it makes. Pass it to your own consumers too.
func PlainRequestBodies(o *sqs.Options) { o.HTTPClient = plainbody.Wrap(o.HTTPClient) }

// clientHTTPTimeout returns the HTTP timeout of an *sqs.Client (or anything with its Options
// method), or 0.
func clientHTTPTimeout(c SQSClient) time.Duration {
	oc, ok := c.(interface{ Options() sqs.Options })
	if !ok {
		return 0
	}
	return plainbody.Timeout(oc.Options().HTTPClient)
}

// idleConns is the most idle connections to SQS the worker has its client keep: as many as its
// calls that can be in flight at once (MaxPollers receives, maxDeleteCalls deletes, and as many
// again for visibility changes). On the loopback the SDK's default of 10 made a worker with 16
// pollers dial 120 connections for 3,000 messages with at most 27 open at once.
const idleConns = 2 * (MaxPollers + maxDeleteCalls)

// callOption returns the option the worker passes on every SQS call: PlainRequestBodies, on a
// copy of the client's HTTP client that keeps idleConns idle connections when the client is an
// *sqs.Client with the SDK's default HTTP client (plainbody.WrapKeeping); the wrapping is done
// once, not per call.
func callOption(c SQSClient) func(*sqs.Options) {
	oc, ok := c.(interface{ Options() sqs.Options })
	if !ok {
		return PlainRequestBodies
	}
	hc := plainbody.WrapKeeping(oc.Options().HTTPClient, idleConns)
	return func(o *sqs.Options) { o.HTTPClient = hc }
}

// countingClient counts every SQS request the worker makes in its Metrics: [SQSRequests], and
// by kind [ReceiveRequests] (with [EmptyReceives]), [DeleteRequests] and [VisibilityRequests].
// It counts calls: a call the SDK retries is one more request to SQS and is counted once.
type countingClient struct {
	SQSClient
	m Metrics
}

func (c countingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.m.Add(SQSRequests, 1)
	c.m.Add(ReceiveRequests, 1)
	out, err := c.SQSClient.ReceiveMessage(ctx, in, optFns...)
	if err == nil && (out == nil || len(out.Messages) == 0) {
		c.m.Add(EmptyReceives, 1)
	}
	return out, err
}

func (c countingClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	c.m.Add(SQSRequests, 1)
	c.m.Add(DeleteRequests, 1)
	return c.SQSClient.DeleteMessage(ctx, in, optFns...)
}

func (c countingClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c.m.Add(SQSRequests, 1)
	c.m.Add(DeleteRequests, 1)
	return c.SQSClient.DeleteMessageBatch(ctx, in, optFns...)
}

func (c countingClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.m.Add(SQSRequests, 1)
	c.m.Add(VisibilityRequests, 1)
	return c.SQSClient.ChangeMessageVisibility(ctx, in, optFns...)
}

func (c countingClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.m.Add(SQSRequests, 1)
	c.m.Add(VisibilityRequests, 1)
	return c.SQSClient.ChangeMessageVisibilityBatch(ctx, in, optFns...)
}

func (c countingClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	c.m.Add(SQSRequests, 1)
	return c.SQSClient.GetQueueAttributes(ctx, in, optFns...)
}

func (c countingClient) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	c.m.Add(SQSRequests, 1)
	return c.SQSClient.GetQueueUrl(ctx, in, optFns...)
}

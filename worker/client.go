package worker

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
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
func PlainRequestBodies(o *sqs.Options) {
	next := o.HTTPClient
	if next == nil {
		next = http.DefaultClient
	}
	if _, ok := next.(plainBodyClient); ok {
		return
	}
	o.HTTPClient = plainBodyClient{next: next}
}

type plainBodyClient struct{ next sqs.HTTPClient }

func (c plainBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = plainBody{req.Body}
	}
	return c.next.Do(req)
}

// GetTimeout passes the wrapped client's timeout through.
func (c plainBodyClient) GetTimeout() time.Duration { return httpTimeout(c.next) }

type plainBody struct{ rc io.ReadCloser }

func (b plainBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b plainBody) Close() error               { return b.rc.Close() }

// httpTimeout returns the overall timeout of an HTTP client, or 0 if it has none or it is unknown.
func httpTimeout(c any) time.Duration {
	switch c := c.(type) {
	case *http.Client:
		return c.Timeout
	case interface{ GetTimeout() time.Duration }:
		return c.GetTimeout()
	}
	return 0
}

// clientHTTPTimeout returns the HTTP timeout of an *sqs.Client (or anything with its Options
// method), or 0.
func clientHTTPTimeout(c SQSClient) time.Duration {
	oc, ok := c.(interface{ Options() sqs.Options })
	if !ok {
		return 0
	}
	return httpTimeout(oc.Options().HTTPClient)
}

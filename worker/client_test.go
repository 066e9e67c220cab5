package worker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/worker"
)

type bodyProbe struct{ writerTo bool }

var errProbe = errors.New("probe: no request sent")

func (p *bodyProbe) Do(r *http.Request) (*http.Response, error) {
	_, p.writerTo = r.Body.(io.WriterTo)
	return nil, errProbe
}

// TestPlainRequestBodies (no server): with the option, the HTTP client gets a request body
// without WriteTo, the method whose failure after the SDK closed the body makes net/http close
// connections under responses (see PlainRequestBodies); without it, the SDK's body has WriteTo (if this
// ever changes, the option may no longer be needed).
func TestPlainRequestBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		opts         []func(*sqs.Options)
		wantWriterTo bool
	}{
		{"sdk body", nil, true},
		{"plain body", []func(*sqs.Options){worker.PlainRequestBodies}, false},
		{"applied twice", []func(*sqs.Options){worker.PlainRequestBodies, worker.PlainRequestBodies}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := &bodyProbe{}
			c := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: probe, BaseEndpoint: aws.String("http://127.0.0.1:1"),
				Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
			_, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String("http://127.0.0.1:1/q")}, tc.opts...)
			if !errors.Is(err, errProbe) {
				t.Fatalf("ReceiveMessage = %v, want the probe's error", err)
			}
			if probe.writerTo != tc.wantWriterTo {
				t.Errorf("body has WriteTo = %v, want %v", probe.writerTo, tc.wantWriterTo)
			}
		})
	}
}

package worker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/latency"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
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

// TestConnectionsKept (the real server, behind harness/latency's proxy at no delay, which counts
// connections): a worker on an *sqs.Client with the SDK's default HTTP client, which keeps 10
// idle connections per host, runs 16 pollers and its deletes (more than 10 calls at once) and
// keeps its connections: it dials no more than were open at once. With the default idle limit
// it closed and dialed connections again all along (in AWS, a TLS handshake each).
func TestConnectionsKept(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, err := latency.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := srv.NewClient(t.Context(), func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + p.Addr()) })
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "conns"})
	const n = 3000
	msgs := make([]sqstest.Message, n)
	for i := range msgs {
		msgs[i] = sqstest.Message{Body: "m-" + strconv.Itoa(i)}
	}
	if err := sqstest.Send(t.Context(), newClient(t), q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	w, err := worker.New(c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Pollers: 16, Concurrency: 40,
		Logger: discardLogger(), Handler: worker.HandlerFunc(func(context.Context, *worker.Message) error {
			handled.Add(1)
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, newClient(t), q.URL, 0, time.Minute)
	workertest.Stop(t, w)
	if handled.Load() < n {
		t.Fatalf("handled %d of %d messages", handled.Load(), n)
	}
	if got, open := p.Accepted(), p.MaxOpen(); got > int64(open)+2 {
		t.Errorf("the worker dialed %d connections with at most %d open at once: it closed idle ones and dialed again", got, open)
	} else {
		t.Logf("%d connections dialed, at most %d open at once", got, open)
	}
}

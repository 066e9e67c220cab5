// Package plainbody works around a fault of aws-sdk-go-v2 (issue #2737) for every AWS client of
// the project (SQS for the worker and the relay, SNS for the relay): it hands each request body
// to the HTTP client as a plain reader, without the WriteTo method of the SDK's own body reader.
//
// net/http probes a request body after writing it; the SDK's reader fails that probe once the SDK
// has closed it, and when a server answers quickly net/http closes the connection under the
// response. The SDK then retries the call. For ReceiveMessage the retry is not harmless: the first
// attempt already made up to ten messages invisible, nobody holds their receipt handles, and they
// wait out the visibility timeout; a retried PublishBatch publishes twice.
package plainbody

import (
	"io"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Doer is an HTTP client as the AWS SDK's clients take it (their HTTPClient option).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Wrap returns next (http.DefaultClient when nil) with plain request bodies. Wrapping twice wraps
// once.
func Wrap(next Doer) Doer {
	if next == nil {
		next = http.DefaultClient
	}
	if _, ok := next.(client); ok {
		return next
	}
	return client{next: next}
}

type client struct{ next Doer }

func (c client) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = plainBody{req.Body}
	}
	return c.next.Do(req)
}

// GetTimeout passes the wrapped client's timeout through.
func (c client) GetTimeout() time.Duration { return Timeout(c.next) }

type plainBody struct{ rc io.ReadCloser }

func (b plainBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b plainBody) Close() error               { return b.rc.Close() }

// Timeout returns the overall timeout of an HTTP client, or 0 if it has none or it is unknown.
func Timeout(c any) time.Duration {
	switch c := c.(type) {
	case *http.Client:
		return c.Timeout
	case interface{ GetTimeout() time.Duration }:
		return c.GetTimeout()
	}
	return 0
}

// WrapKeeping is Wrap, and when next is the SDK's default (buildable) HTTP client keeping fewer
// than idle idle connections per host, it wraps a copy of it that keeps idle (the copy has its
// own connections; every other setting of next is kept). A caller that makes more calls at once
// than the SDK's default of 10 needs it: a call that ends while 10 connections are idle closes its
// own, and the next call beyond them dials again (in AWS, with a TLS handshake). Any other HTTP
// client is the user's choice and is wrapped as it is.
func WrapKeeping(next Doer, idle int) Doer {
	bc, ok := next.(*awshttp.BuildableClient)
	if !ok || bc.GetTransport().MaxIdleConnsPerHost >= idle {
		return Wrap(next)
	}
	return Wrap(bc.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = idle
		t.MaxIdleConns = max(t.MaxIdleConns, idle)
	}))
}

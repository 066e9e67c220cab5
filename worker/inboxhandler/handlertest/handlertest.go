// Package handlertest tests a user's inbox handler the way the worker runs it: it delivers one
// message to the handler several times, through the real inbox code path and a real PostgreSQL
// database, and reports what each delivery came to. A handler test is then three lines, and
// asserts the user's own tables:
//
//	h, _ := inboxhandler.New(ib, "warehouse", nil, pick)
//	outs := handlertest.Deliver(t, h, handlertest.Message(`{"id":"evt_9f3k","order_id":"o-1"}`), 5)
//	// outs: processed, duplicate, duplicate, duplicate, duplicate; and one pick task in the table
//
// It needs no SQS server: the worker's side of a delivery (receive, delete) adds nothing the
// handler can observe. What the worker would do with each result is the [Outcome].
package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Outcome is what the worker would do with a delivery's result.
type Outcome string

// The outcomes, named like the worker's counters.
const (
	Processed   Outcome = "processed"   // nil: committed, the message deleted
	Duplicate   Outcome = "duplicate"   // worker.ErrDuplicate: done before, the message deleted
	Discarded   Outcome = "discarded"   // worker.Discard: deleted without effect
	Retried     Outcome = "retried"     // worker.RetryAfter: delivered again after a delay
	Blocked     Outcome = "blocked"     // worker.RetryBlocked: another consumer holds the event
	Unavailable Outcome = "unavailable" // worker.Unavailable: retried, and the pollers pause
	Failed      Outcome = "failed"      // any other error: retried, then the DLQ
)

// OutcomeOf classifies a handler's result as the worker does.
func OutcomeOf(err error) Outcome {
	var (
		discard *worker.DiscardError
		retry   *worker.RetryError
		blocked *worker.BlockedError
		unavail *worker.UnavailableError
	)
	switch {
	case err == nil:
		return Processed
	case errors.Is(err, worker.ErrDuplicate):
		return Duplicate
	case errors.As(err, &discard):
		return Discarded
	case errors.As(err, &blocked):
		return Blocked
	case errors.As(err, &retry):
		return Retried
	case errors.As(err, &unavail):
		return Unavailable
	}
	return Failed
}

// Delivery is one delivery's result.
type Delivery struct {
	Outcome Outcome
	Err     error
}

// Deliver hands m to h n times, one after another, as SQS redelivering the same message would
// (ReceiveCount 1, 2, ...; a fresh receipt handle each time), and returns each delivery's result.
// A panic in h is reported as the worker reports it (a *worker.PanicError, Failed).
func Deliver(t testing.TB, h worker.Handler, m *worker.Message, n int) []Delivery {
	t.Helper()
	out := make([]Delivery, 0, n)
	for i := range n {
		d := *m
		d.ReceiveCount = i + 1
		d.ReceiptHandle = "handlertest-" + randHex()
		err := call(t.Context(), h, &d)
		out = append(out, Delivery{Outcome: OutcomeOf(err), Err: err})
	}
	return out
}

// Outcomes returns just the outcomes of ds, for comparing with a want list.
func Outcomes(ds []Delivery) []Outcome {
	out := make([]Outcome, len(ds))
	for i, d := range ds {
		out[i] = d.Outcome
	}
	return out
}

// Message returns a message with body and, in pairs, String message attributes
// ("event_id", "evt_1", ...), as a producer would send it.
func Message(body string, attrs ...string) *worker.Message {
	m := &worker.Message{ID: "handlertest-" + randHex(), Body: []byte(body), ReceiveCount: 1}
	for i := 0; i+1 < len(attrs); i += 2 {
		if m.Attributes == nil {
			m.Attributes = map[string]types.MessageAttributeValue{}
		}
		m.Attributes[attrs[i]] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(attrs[i+1])}
	}
	return m
}

func call(ctx context.Context, h worker.Handler, m *worker.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &worker.PanicError{Value: v}
		}
	}()
	return h.Handle(ctx, m)
}

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

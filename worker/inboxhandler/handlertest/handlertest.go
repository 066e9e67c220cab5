package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
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
	Failed      Outcome = "failed"      // any other error, a panic or a timeout: retried, then the DLQ
	// Released is worker.ErrNotRun: the message was not run, for a reason outside it (an earlier
	// message of its FIFO group in the batch was not done, or an earlier message of the batch
	// carried the same event and did not commit). The worker makes it visible again at once,
	// without counting a failure.
	Released Outcome = "released"
	// BrokenDeployment is a *worker.DeploymentError (worker.BrokenDeployment): the work met a
	// missing table, column, function or grant. The worker pauses its pollers and the message
	// comes back after the pause, not counted as failed.
	BrokenDeployment Outcome = "broken_deployment"
)

// OutcomeOf classifies a handler's result as the worker does.
func OutcomeOf(err error) Outcome {
	var (
		discard *worker.DiscardError
		retry   *worker.RetryError
		blocked *worker.BlockedError
		broken  *worker.DeploymentError
		unavail *worker.UnavailableError
	)
	switch {
	case err == nil:
		return Processed
	case errors.Is(err, worker.ErrDuplicate):
		return Duplicate
	case errors.As(err, &discard):
		return Discarded
	case errors.Is(err, worker.ErrNotRun):
		return Released
	case errors.As(err, &blocked):
		return Blocked
	case errors.As(err, &retry):
		return Retried
	case errors.As(err, &broken):
		return BrokenDeployment
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

// DefaultHandlerTimeout is the handler timeout of a delivery unless Config.HandlerTimeout says
// otherwise: the worker's default.
const DefaultHandlerTimeout = worker.DefaultHandlerTimeout

// Config configures deliveries. The zero value gives the worker's defaults, and the package's
// functions ([Deliver], [DeliverBatch], [DeliverConcurrently]) use it; a test that needs another
// setting calls the same method on a Config of its own:
//
//	handlertest.Config{HandlerTimeout: time.Second}.Deliver(t, h, m, 1)
type Config struct {
	// HandlerTimeout bounds each message's work, as worker Config.HandlerTimeout does: its context
	// ends with the cause worker.ErrHandlerTimeout, and the delivery is Failed. 0 means
	// DefaultHandlerTimeout (5 min); negative means no timeout.
	HandlerTimeout time.Duration
}

func (c Config) timeout() time.Duration {
	switch {
	case c.HandlerTimeout == 0:
		return DefaultHandlerTimeout
	case c.HandlerTimeout < 0:
		return 0
	}
	return c.HandlerTimeout
}

// Deliver hands m to h n times, one after another, as SQS redelivering the same message would
// (ReceiveCount 1, 2, ...; a fresh receipt handle each time), and returns each delivery's result.
// Each delivery takes the worker's path: when h is a [worker.BatchHandler] (the inbox handler is),
// a batch of one through HandleBatch ([worker.RunBatch]), as the worker runs it by default;
// otherwise through Handle. Each is bounded by [DefaultHandlerTimeout] (see [Config]). A panic in
// h is reported as the worker reports it (a *worker.PanicError, Failed).
func Deliver(t testing.TB, h worker.Handler, m *worker.Message, n int) []Delivery {
	t.Helper()
	return Config{}.Deliver(t, h, m, n)
}

// Deliver is the package's [Deliver] with c's settings.
func (c Config) Deliver(t testing.TB, h worker.Handler, m *worker.Message, n int) []Delivery {
	t.Helper()
	if m == nil {
		t.Fatal("handlertest: Deliver: the message is nil")
	}
	out := make([]Delivery, 0, n)
	for i := range n {
		d := fresh(m)
		d.ReceiveCount = i + 1
		out = append(out, c.run(t.Context(), h, []*worker.Message{d})...)
	}
	return out
}

// DeliverBatch hands msgs to h in one HandleBatch call ([worker.RunBatch]), as the worker does
// with the messages it holds at once, and returns each message's result in the order of msgs.
// For the inbox handler the batch is one transaction, a savepoint per message: a message whose
// work fails is rolled back alone and the others commit; the same event twice makes one effect.
// Messages with a GroupID keep the FIFO rule: behind a message of its group that is not done, a
// message is not run ([Released]). Each message gets a fresh receipt handle and keeps its
// ReceiveCount (1 when unset). Each message's work is bounded by [DefaultHandlerTimeout] from its
// turn (see [Config]).
//
// h must be a [worker.BatchHandler] when msgs holds more than one message (the worker hands a
// plain Handler one message at a time); a batch of one on a plain Handler goes through Handle.
// At most worker.MaxHandlerBatch messages. It fails the test otherwise.
func DeliverBatch(t testing.TB, h worker.Handler, msgs ...*worker.Message) []Delivery {
	t.Helper()
	return Config{}.DeliverBatch(t, h, msgs...)
}

// DeliverBatch is the package's [DeliverBatch] with c's settings.
func (c Config) DeliverBatch(t testing.TB, h worker.Handler, msgs ...*worker.Message) []Delivery {
	t.Helper()
	b := prepare(t, h, msgs)
	return c.run(t.Context(), h, b)
}

// DeliverConcurrently hands each of batches to h at once, each as [DeliverBatch] does, on a
// goroutine of its own: several pods that received the same event at once. The batches start
// together (each goroutine waits at a barrier until all are ready), and it returns when all have
// returned, with each batch's results in the order of batches. What happens between them is the
// database's: for the inbox handler, one claim of an event commits and the others wait for it and
// are duplicates (or are Blocked when the wait outlasts the inbox's LockTimeout). For the inbox
// handler, each batch holds a connection of the inbox's pool while it runs.
func DeliverConcurrently(t testing.TB, h worker.Handler, batches ...[]*worker.Message) [][]Delivery {
	t.Helper()
	return Config{}.DeliverConcurrently(t, h, batches...)
}

// DeliverConcurrently is the package's [DeliverConcurrently] with c's settings.
func (c Config) DeliverConcurrently(t testing.TB, h worker.Handler, batches ...[]*worker.Message) [][]Delivery {
	t.Helper()
	prepared := make([][]*worker.Message, len(batches))
	for i, msgs := range batches {
		prepared[i] = prepare(t, h, msgs) // t.Fatal only here, on the test's goroutine
	}
	ctx := t.Context()
	out := make([][]Delivery, len(batches))
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(len(prepared))
	for i, msgs := range prepared {
		done.Go(func() {
			ready.Done()
			<-start
			out[i] = c.run(ctx, h, msgs)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}

// prepare checks a batch for h and returns fresh copies of its messages.
func prepare(t testing.TB, h worker.Handler, msgs []*worker.Message) []*worker.Message {
	t.Helper()
	if _, ok := h.(worker.BatchHandler); !ok && len(msgs) > 1 {
		t.Fatalf("handlertest: a batch of %d messages for %T, which is not a worker.BatchHandler: "+
			"the worker hands a plain Handler one message at a time; use Deliver, or batches of one", len(msgs), h)
	}
	if len(msgs) > worker.MaxHandlerBatch {
		t.Fatalf("handlertest: a batch of %d messages; the worker's batches hold at most %d (worker.MaxHandlerBatch)",
			len(msgs), worker.MaxHandlerBatch)
	}
	out := make([]*worker.Message, len(msgs))
	for i, m := range msgs {
		if m == nil {
			t.Fatalf("handlertest: message %d of the batch is nil", i)
		}
		out[i] = fresh(m)
	}
	return out
}

// fresh returns a copy of m as a new delivery: a fresh receipt handle, ReceiveCount 1 and the
// receive times now when m leaves them unset.
func fresh(m *worker.Message) *worker.Message {
	d := *m
	d.ReceiptHandle = "handlertest-" + randHex()
	d.ReceiveCount = max(d.ReceiveCount, 1)
	now := time.Now()
	if d.Received.IsZero() {
		d.Received = now
	}
	if d.FirstReceived.IsZero() {
		d.FirstReceived = d.Received
	}
	return &d
}

// run delivers one batch on the worker's path for h.
func (c Config) run(ctx context.Context, h worker.Handler, msgs []*worker.Message) []Delivery {
	if len(msgs) == 0 {
		return nil
	}
	var results []error
	if bh, ok := h.(worker.BatchHandler); ok {
		results = worker.RunBatch(ctx, bh, msgs, c.timeout())
	} else {
		results = []error{c.handle(ctx, h, msgs[0])}
	}
	out := make([]Delivery, len(results))
	for i, err := range results {
		out[i] = Delivery{Outcome: OutcomeOf(err), Err: err}
	}
	return out
}

// handle calls Handle as the worker does: bounded by the handler timeout, a panic recovered.
func (c Config) handle(ctx context.Context, h worker.Handler, m *worker.Message) (err error) {
	if d := c.timeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, worker.ErrHandlerTimeout)
		defer cancel()
	}
	defer func() {
		if v := recover(); v != nil {
			err = panics.Recovered(v)
		}
	}()
	return h.Handle(ctx, m)
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

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

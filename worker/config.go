package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
)

// Defaults for Config.
const (
	// DefaultConcurrency is the number of handlers in flight at most.
	DefaultConcurrency = 10
	// DefaultBatchSize is the number of messages one ReceiveMessage asks for at most (SQS's limit).
	DefaultBatchSize = 10
	// DefaultWaitTime is the long-poll wait of ReceiveMessage (SQS's limit).
	DefaultWaitTime = 20 * time.Second
	// DefaultHandlerTimeout is how long a handler may run.
	DefaultHandlerTimeout = 5 * time.Minute
	// DefaultShutdownTimeout is how long Stop lets in-flight handlers finish before it cancels
	// them. With 5 s more for the hard stop (cancelled handlers roll back, held messages are
	// released), it fits in ECS's default stop timeout of 30 s between SIGTERM and SIGKILL.
	DefaultShutdownTimeout = 20 * time.Second
	// DefaultBackoffMin is the redelivery delay after the first failed receive.
	DefaultBackoffMin = time.Second
	// DefaultBackoffMax caps the redelivery delay.
	DefaultBackoffMax = 5 * time.Minute
	// DefaultDeleteInterval is how long a successful message waits, at most, for its batched
	// delete to be sent.
	DefaultDeleteInterval = 50 * time.Millisecond
	// DefaultMaxPollers caps the default number of pollers.
	DefaultMaxPollers = 16
	// DefaultHandlerBatch is the most messages a [BatchHandler] gets in one call (for the inbox:
	// one transaction), when Config.HandlerBatch is 0. It is SQS's receive maximum.
	DefaultHandlerBatch = 10
	// DefaultLinger is how long a batch with room left waits for more messages before it starts.
	DefaultLinger = 2 * time.Millisecond
	// DefaultReceiveLinger is the longest a poller waits after a receive that was not full.
	DefaultReceiveLinger = 50 * time.Millisecond
	// DefaultMaxHold is how long a received message may wait for a free handler before it is
	// released to the queue.
	DefaultMaxHold = 30 * time.Second
	// DefaultStartTimeout bounds Start's calls (queue attributes, the dead-letter queue, the
	// handler's start-up checks).
	DefaultStartTimeout = 30 * time.Second
)

// Limits that SQS sets.
const (
	// MaxVisibility is SQS's 12-hour cap: the longest visibility timeout, and the longest one
	// delivery can stay invisible (docs/how-it-works.md, "Leases and SQS's 12-hour cap"; lease.go).
	MaxVisibility = 12 * time.Hour
	// MaxWaitTime is the longest long-poll wait.
	MaxWaitTime = 20 * time.Second
	// MaxBatchSize is the most messages one ReceiveMessage returns.
	MaxBatchSize = 10
)

// MaxHandlerBatch is the largest Config.HandlerBatch. The inbox runs each message of a batch in a
// savepoint of its own (a subtransaction), and PostgreSQL slows every session down once a
// transaction holds more than 64 of them; 20 leaves room for a savepoint of the handler's own
// inside each message's.
const MaxHandlerBatch = 20

// pollerShare is how many full receives of running messages one default poller serves.
const pollerShare = 4

// DefaultPollers is the number of pollers a Config with Pollers 0 gets for these settings (all
// positive): Concurrency × HandlerBatch / (4 × BatchSize) rounded up, plus one, at most
// DefaultMaxPollers. With the prefetch, pollers only keep the held messages topped up; more of
// them split the slots a batch frees into partial receives (more calls and allocations per
// message).
func DefaultPollers(concurrency, handlerBatch, batchSize int) int {
	running, perPoller := concurrency*handlerBatch, pollerShare*batchSize
	return min((running+perPoller-1)/perPoller+1, DefaultMaxPollers)
}

// maxLinger bounds Config.Linger: a batch exists to save work under load, not to add latency.
const maxLinger = 100 * time.Millisecond

// Config configures a [Worker].
type Config struct {
	// QueueURL is the queue's URL. Either it or QueueName must be set; QueueURL wins.
	QueueURL string

	// QueueName is the queue's name, looked up with GetQueueUrl at start when QueueURL is empty.
	QueueName string

	// Handler processes each message. Required. If it implements [QueueChecker], Start calls it.
	Handler Handler

	// Concurrency is the most handler calls in flight at once: messages for a plain [Handler],
	// batches for a [BatchHandler] (for the inbox, each batch is a transaction on a connection of
	// its own, so the pool needs Concurrency connections). 0 means DefaultConcurrency (10), grown
	// up to what a [ConcurrencyLimiter] handler allows (at most MaxConcurrency) while the
	// handler's time per message does not grow with it; negative is an error.
	Concurrency int

	// HandlerBatch is the most messages a [BatchHandler] gets in one call: for the inbox handler,
	// one transaction with a savepoint per message and one COMMIT, then one DeleteMessageBatch.
	// The messages of a batch run one after another, so the batch commits after the sum of their
	// handlers' times: lower it (1 turns batching off) when handlers make slow external calls. 0
	// means DefaultHandlerBatch (10) for a BatchHandler, and 1 for a plain Handler; at most
	// MaxHandlerBatch (20); negative is an error.
	HandlerBatch int

	// Linger is how long a batch that has room for more messages waits for them before it
	// starts, so that a batch fills under load and a lone message at low load waits only this
	// long. 0 means DefaultLinger (2 ms); negative means no wait; at most 100 ms.
	Linger time.Duration

	// ReceiveLinger bounds how long a poller waits, after a receive that brought some messages
	// but fewer than it asked for, before it receives again, so that the messages arriving
	// meanwhile come in one ReceiveMessage request instead of one request each. SQS bills every
	// request: at a light load, receiving each message as it comes costs several requests per
	// ten messages. The wait is the time the rest of the batch takes to arrive at the rate the
	// poller's last receive saw, at most ReceiveLinger; a full receive never waits, nor does an
	// empty one that waited out its long poll, so a backlog and an idle queue cost nothing. What
	// it costs is latency: a message that arrives during the wait waits for it. 0 means
	// DefaultReceiveLinger (50 ms); negative means no wait; at most 1 s.
	//
	// Empty receives back before half their wait time (SQS never answers so; some emulators and
	// proxies do) are retried at once if some poller got a message meanwhile (fauxqs lets every
	// waiting poll go when a message arrives); when two come back in a row with none received
	// meanwhile, the poller waits ReceiveLinger (DefaultReceiveLinger if negative), twice as long
	// after each further one, up to 1 s, so that pollers do not spin on a server that does not
	// wait.
	ReceiveLinger time.Duration

	// Prefetch is the number of received messages the worker may hold, beyond those its handlers
	// are running, so that a handler that frees up finds its next messages received already
	// instead of waiting for a ReceiveMessage round trip. A held message is covered as a running
	// one is: its lease (visibility) is extended from its receive, it is released (visibility 0)
	// at stop, and it waits at most MaxHold (with MaxPerGroup, see there). 0 means Concurrency ×
	// HandlerBatch, grown with the pollers when they are sized too (Pollers 0): enough for the
	// messages on their way from a distant SQS (see Pollers); negative means none (the worker
	// then receives only for free handlers).
	Prefetch int

	// MaxHold is the longest a received message waits for a handler. A held message that has
	// waited this long is released to the queue (visibility 0) and counted as Released; the check
	// runs at each of its heartbeats, so the bound is MaxHold plus a third of the visibility
	// timeout. A message on its last receive (the queue's maxReceiveCount reached) is never
	// released for waiting, since the queue would dead-letter it unrun: it keeps its lease and
	// runs when a handler frees. With MaxPerGroup on a standard queue the wait counts from the
	// later of the message's arrival and its group's last progress and is checked every 100 ms
	// (see MaxPerGroup). 0 means DefaultMaxHold (30 s); negative is an error.
	MaxHold time.Duration

	// Pollers is the number of goroutines that call ReceiveMessage. 0 means sized by the worker:
	// by Little's law, R messages a second through a receive that takes L seconds need about
	// R × L messages on their way, so the worker measures both and runs
	// ceil(1.3 × R × L / BatchSize) + 1 pollers, at least DefaultPollers (what the loopback needs)
	// and at most MaxPollers (64); with SQS 20 ms away that is several times the loopback's. L is
	// the fastest receive that returned messages (the round trip without the wait in a busy
	// server's queue, which more pollers would only lengthen). While the receives come back less
	// than half full on average (no backlog: each takes what arrived since the one before), the
	// floor is 2 pollers instead, since more would only split the arrivals into more, smaller
	// receives. On an empty queue the sized pollers fall to one long poll until a receive returns
	// messages. Negative is an error.
	Pollers int

	// MaxPerGroup is the most runners (handler calls, each a message or a batch) that the messages
	// of one MessageGroupId may hold at once on a standard queue: a fair queue, where the group id
	// names a tenant. A message over its group's cap waits for a runner, leased (its visibility
	// extended as a held message's is), while the messages of other groups go past it; a runner
	// that frees takes the oldest waiting messages whose groups are under their caps, so one
	// tenant's backlog cannot take every runner. While a capped group's messages hold every slot
	// and a runner is free, the worker still receives one message at a time, at most every 5 ms,
	// holding up to max(Prefetch, BatchSize) messages beyond its slots, so that another group's
	// message does not wait for a slot to free; those receives can bring the capped group's own
	// messages too, which then wait their turn behind all the others of it that the worker holds.
	// A waiting message is kept while its group progresses (one of its runners finished, or it
	// took one, within MaxHold), however long its turn takes: releasing it would cost it a
	// receive, and, repeated, the DLQ. Only a group that made no progress for MaxHold (its handler
	// stuck, or slower than MaxHold: raise MaxHold then) has its waiting messages released, to
	// come back after as long as it has made none (at most 15 minutes); a message on its last
	// receive (the queue's maxReceiveCount) is never released for waiting: it keeps its slot
	// until it runs. Messages without a group id are not capped. Groups never order or halt one
	// another on a standard queue: that is FIFO's rule,
	// kept only on a .fifo queue, where MaxPerGroup has no effect (SQS runs one message of a
	// group at a time there). A value of Concurrency or more caps nothing the worker would reach
	// unless the concurrency grows (Concurrency 0). 0 (the default) means no cap; negative is an
	// error.
	MaxPerGroup int

	// BatchSize is the most messages one ReceiveMessage asks for, 1 to 10. 0 means
	// DefaultBatchSize (10).
	BatchSize int

	// WaitTime is the long-poll wait of ReceiveMessage, whole seconds up to 20 s. 0 means
	// DefaultWaitTime (20 s); negative means short polling (the worker then pauses briefly after an
	// empty receive). The SQS client's HTTP timeout, if it has one, must be longer.
	WaitTime time.Duration

	// VisibilityTimeout is the visibility timeout asked for on receive, and the extension of each
	// heartbeat (every third of it, from the receive until the message is settled or released;
	// a message waiting for its turn is covered as a running one is). When the heartbeat cannot
	// extend (SQS's 12-hour cap is near: see [MaxVisibility]; or the receipt handle is gone) the
	// handler's context is cancelled with [ErrLeaseLost], so its work rolls back. A failed
	// extension is retried with exponential backoff and jitter, from one second up to the
	// interval, with a last try before the lease's final two seconds; the first failure in a row
	// is logged as a warning, the others at debug level. Whole seconds, up to 12 h. 0 means the
	// queue's own; negative is an error.
	VisibilityTimeout time.Duration

	// HandlerTimeout is how long a handler may run before its context is cancelled with
	// [ErrHandlerTimeout]. At most 12 h (SQS's cap). 0 means DefaultHandlerTimeout (5 min);
	// negative means no timeout.
	HandlerTimeout time.Duration

	// ShutdownTimeout is how long [Worker.Stop] lets in-flight handlers finish before it cancels
	// them with [ErrStopping]. 0 means DefaultShutdownTimeout (20 s); negative is an error.
	ShutdownTimeout time.Duration

	// Backoff gives the redelivery delay of a failed message from its receive count (1 on the
	// first delivery). The result is rounded up to whole seconds and capped by SQS's 12-hour
	// limit. nil means ExponentialBackoff(DefaultBackoffMin, DefaultBackoffMax).
	Backoff func(receiveCount int) time.Duration

	// DeleteInterval is how long a successful message waits, at most, for its delete to be sent
	// in a batch of up to 10. A longer wait fills the batches at a light load (SQS bills each
	// call); the message is committed already, so it delays nothing but the delete. 0 means
	// DefaultDeleteInterval (50 ms); negative is an error.
	DeleteInterval time.Duration

	// Logger receives the worker's logs. Message bodies are never logged; durations are Go
	// duration strings ("retry_in":"1s"), whatever the handler's format. nil means
	// slog.Default().
	Logger *slog.Logger

	// Metrics receives counters and histograms. nil means none.
	Metrics Metrics

	// SNS says whether messages that arrive in an SNS notification envelope (a topic subscription
	// without raw message delivery) are unwrapped, so that the handler sees the published body and
	// message attributes, and Message.SNS the topic, SNS message id, subject and timestamp. Only a
	// message without SQS message attributes is unwrapped (SNS sets none on an envelope), so a
	// body can never replace the message's own attributes. The zero value is SNSAuto; see
	// [SNSMode].
	SNS SNSMode

	// Payloads fetches the payloads of messages whose body points to a payload offloaded to S3
	// (the format of AWS's extended client libraries; see package s3payload), so that the
	// handler sees the payload as if it had come inline: in a raw message, or inside an SNS
	// envelope, marked by a reserved size attribute on the message as delivered. nil means
	// none: such a message is then refused before its handler ([ErrOffloadedPayload]) and goes
	// the retry-then-DLQ way, since its body is not its payload.
	Payloads PayloadFetcher

	// StartTimeout bounds [Worker.Start]: reading the queue's and its dead-letter queue's
	// attributes and the handler's start-up checks (for the inbox, its database). An endpoint that
	// accepts connections but never answers then fails Start with an error that names it, instead
	// of hanging. 0 means DefaultStartTimeout (30 s); negative is an error.
	StartTimeout time.Duration

	// IgnoreDeadLetterRetention, when true, lets Start go on when the dead-letter queue's
	// retention cannot be read (typically a missing sqs:GetQueueAttributes permission on it); the
	// handler's [QueueChecker] then sees the source queue's retention only, which can be shorter
	// than the real redelivery horizon. Default false: Start refuses with a *[DeadLetterError].
	IgnoreDeadLetterRetention bool
}

func (c *Config) setDefaults() {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	if _, ok := c.Handler.(BatchHandler); ok {
		c.HandlerBatch = cmp.Or(c.HandlerBatch, DefaultHandlerBatch)
	} else if c.HandlerBatch == 0 {
		c.HandlerBatch = 1
	}
	c.Linger = cmp.Or(c.Linger, DefaultLinger)
	c.ReceiveLinger = cmp.Or(c.ReceiveLinger, DefaultReceiveLinger)
	c.MaxHold = cmp.Or(c.MaxHold, DefaultMaxHold)
	if c.BatchSize > 0 && c.Concurrency > 0 && c.HandlerBatch > 0 {
		c.Pollers = cmp.Or(c.Pollers, DefaultPollers(c.Concurrency, c.HandlerBatch, c.BatchSize))
		c.Prefetch = cmp.Or(c.Prefetch, c.Concurrency*c.HandlerBatch)
	}
	c.WaitTime = cmp.Or(c.WaitTime, DefaultWaitTime)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, DefaultHandlerTimeout)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.DeleteInterval = cmp.Or(c.DeleteInterval, DefaultDeleteInterval)
	c.StartTimeout = cmp.Or(c.StartTimeout, DefaultStartTimeout)
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(DefaultBackoffMin, DefaultBackoffMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = logdur.Logger(c.Logger) // durations as "1.5s", not nanoseconds
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
}

func (c *Config) validate() error {
	switch {
	case c.QueueURL == "" && c.QueueName == "":
		return errors.New("worker: Config.QueueURL or Config.QueueName must be set")
	case c.Handler == nil:
		return errors.New("worker: Config.Handler is nil")
	case c.Concurrency < 0:
		return fmt.Errorf("worker: Config.Concurrency is %d; it must be positive (0 means %d)", c.Concurrency, DefaultConcurrency)
	case c.MaxPerGroup < 0:
		return fmt.Errorf("worker: Config.MaxPerGroup is %d; it must be positive (0 means no cap per message group)", c.MaxPerGroup)
	case c.Pollers < 0:
		return fmt.Errorf("worker: Config.Pollers is %d; it must be positive (0 means a default)", c.Pollers)
	case c.HandlerBatch < 1 || c.HandlerBatch > MaxHandlerBatch:
		return fmt.Errorf("worker: Config.HandlerBatch is %d; it must be 1 to %d (0 means %d for a BatchHandler)", c.HandlerBatch, MaxHandlerBatch, DefaultHandlerBatch)
	case c.HandlerBatch > 1 && !isBatchHandler(c.Handler):
		return fmt.Errorf("worker: Config.HandlerBatch is %d, but the handler (%T) does not implement BatchHandler; leave it 0", c.HandlerBatch, c.Handler)
	case c.Linger > maxLinger:
		return fmt.Errorf("worker: Config.Linger is %v; it must be at most %v (0 means %v, negative means none)", c.Linger, maxLinger, DefaultLinger)
	case c.ReceiveLinger > time.Second:
		return fmt.Errorf("worker: Config.ReceiveLinger is %v; it must be at most 1s (0 means %v, negative means none)", c.ReceiveLinger, DefaultReceiveLinger)
	case c.MaxHold < 0:
		return fmt.Errorf("worker: Config.MaxHold is %v; it must be positive (0 means %v)", c.MaxHold, DefaultMaxHold)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("worker: Config.BatchSize is %d; it must be 1 to %d (0 means %d)", c.BatchSize, MaxBatchSize, DefaultBatchSize)
	case c.WaitTime > MaxWaitTime || (c.WaitTime > 0 && c.WaitTime%time.Second != 0):
		return fmt.Errorf("worker: Config.WaitTime is %v; it must be whole seconds up to %v (0 means %v, negative means short polling)", c.WaitTime, MaxWaitTime, DefaultWaitTime)
	case c.VisibilityTimeout < 0 || c.VisibilityTimeout > MaxVisibility || c.VisibilityTimeout%time.Second != 0:
		return fmt.Errorf("worker: Config.VisibilityTimeout is %v; it must be whole seconds up to %v (0 means the queue's)", c.VisibilityTimeout, MaxVisibility)
	case c.HandlerTimeout > MaxVisibility:
		return fmt.Errorf("worker: Config.HandlerTimeout is %v; SQS cannot keep a message invisible longer than %v", c.HandlerTimeout, MaxVisibility)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("worker: Config.ShutdownTimeout is %v; it must be positive (0 means %v)", c.ShutdownTimeout, DefaultShutdownTimeout)
	case c.SNS < SNSAuto || c.SNS > SNSEnvelope:
		return fmt.Errorf("worker: Config.SNS is %v; it must be SNSAuto, SNSRaw or SNSEnvelope", c.SNS)
	case c.StartTimeout < 0:
		return fmt.Errorf("worker: Config.StartTimeout is %v; it must be positive (0 means %v)", c.StartTimeout, DefaultStartTimeout)
	case c.DeleteInterval < 0:
		return fmt.Errorf("worker: Config.DeleteInterval is %v; it must be positive (0 means %v)", c.DeleteInterval, DefaultDeleteInterval)
	}
	return nil
}

// waitSeconds is the WaitTimeSeconds of ReceiveMessage.
func (c *Config) waitSeconds() int32 {
	if c.WaitTime < 0 {
		return 0
	}
	return int32(c.WaitTime / time.Second)
}

// capacity is the most received messages the worker holds at once: those its handlers run, and
// the prefetched ones waiting for a handler.
func (c *Config) capacity() int {
	return c.Concurrency*c.HandlerBatch + max(c.Prefetch, 0)
}

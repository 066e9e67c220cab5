package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Severity is how bad a finding is.
type Severity string

const (
	// Error is a setting that can lose a message, apply it twice or stop processing.
	Error Severity = "error"
	// Warning is a setting that costs money or time, or a state an operator should look at.
	Warning Severity = "warning"
)

// Finding is one setting that is not as the worker needs it.
type Finding struct {
	// Severity is Error or Warning.
	Severity Severity `json:"severity"`
	// Check names the check, such as "queue.redrive" or "database.synchronous_commit".
	Check string `json:"check"`
	// Setting names what was read: the queue attribute, the database setting, the table.
	Setting string `json:"setting"`
	// Seen is the value found, Want the value the worker needs.
	Seen string `json:"seen"`
	Want string `json:"want"`
	// Fix says how to change it: the AWS CLI command, the Terraform attribute or the SQL.
	Fix string `json:"fix"`
}

// Defaults for Config.
const (
	// DefaultMinMaxReceiveCount is the lowest sane maxReceiveCount: the inbox needs one delivery
	// to a consumer that froze holding an event's claim, one blocked retry and one that runs.
	DefaultMinMaxReceiveCount = 3
	// DefaultMaxMaxReceiveCount is the highest maxReceiveCount that does not waste receives: a
	// poison message is received this many times, each after its backoff, before the DLQ.
	DefaultMaxMaxReceiveCount = 100
	// DefaultOutboxAge is the age of the outbox's oldest unsent row past which the relay is
	// reported as not keeping up (or not running).
	DefaultOutboxAge = 5 * time.Minute
	// DefaultClockSkew is the distance between this machine's clock and the database's past
	// which a warning is given.
	DefaultClockSkew = 2 * time.Second
	// KeyTimeClockSkew is the distance past which the keytime layout's routing of keys by their
	// time is an error: keys made on a machine with this clock land in another generation than
	// the database's purge expects.
	KeyTimeClockSkew = time.Minute
)

// Config says what to check: the worker's settings as the program would run with them.
type Config struct {
	// Queue is the queue's name or URL. Empty means the queue is not checked.
	Queue string
	// Worker is the worker's configuration: HandlerTimeout, VisibilityTimeout, HandlerBatch,
	// Concurrency and SNS are read, with the worker's defaults for zero fields.
	Worker worker.Config
	// Inbox is the inbox's configuration: Schema, Retention, PurgeInterval and
	// AcceptAsyncCommit are read, with the inbox's defaults for zero fields.
	Inbox inbox.Config
	// Outbox, when true, requires the outbox in the inbox's schema; when false it is checked
	// only if its migrations have been applied there.
	Outbox bool
	// OffloadThreshold is the size over which producers offload a message's body to S3. 0 means
	// s3payload.DefaultThreshold.
	OffloadThreshold int
	// Routes are the message types the worker's router routes, for the SNS filter policies. nil
	// means the worker takes every message (a single handler).
	Routes []string
	// PublishesRoutes says that the worker's handler publishes its queue's routes at start (an
	// inboxhandler.Handler or Router does), which needs write grants on inbox_routes. A Router's
	// worker (Routes set) needs them whatever this says.
	PublishesRoutes bool
	// TypeAttribute is the message attribute the router reads the type from. "" means "type".
	TypeAttribute string
	// PoolSize is the most connections the worker's pool opens. 0 means the pool given in
	// Deps is the worker's own, and its MaxConns is read.
	PoolSize int
	// Now is this machine's clock. nil means time.Now.
	Now func() time.Time
}

// SQSClient is the part of the SQS client doctor uses: it can only read a queue's URL and
// attributes.
type SQSClient = worker.QueueReader

// SNSClient is the part of the SNS client doctor uses to find the subscriptions that feed the
// queue: reads only.
type SNSClient interface {
	ListSubscriptions(ctx context.Context, params *sns.ListSubscriptionsInput, optFns ...func(*sns.Options)) (*sns.ListSubscriptionsOutput, error)
	GetSubscriptionAttributes(ctx context.Context, params *sns.GetSubscriptionAttributesInput, optFns ...func(*sns.Options)) (*sns.GetSubscriptionAttributesOutput, error)
}

// KMSClient is the part of the KMS client doctor uses: it reads a key's metadata.
type KMSClient interface {
	DescribeKey(ctx context.Context, params *kms.DescribeKeyInput, optFns ...func(*kms.Options)) (*kms.DescribeKeyOutput, error)
}

// Deps are the clients doctor reads through. Each may be nil: what it would check is skipped.
type Deps struct {
	SQS SQSClient
	// SNS, when set, is asked for the subscriptions that deliver to the queue; a caller that may
	// not list them gets a warning saying so.
	SNS SNSClient
	// KMS, when set, is asked for the state of the queue's customer managed key (KmsMasterKeyId):
	// a key that is not enabled stops the queue. A caller that may not describe the key gets a
	// warning saying so.
	KMS KMSClient
	// Pool is the database the worker uses, opened as the worker opens it (same URL).
	Pool *pgxpool.Pool
}

// Report is what a run found.
type Report struct {
	// Findings are the problems, errors first.
	Findings []Finding `json:"findings"`
	// Checked names the checks that ran.
	Checked []string `json:"checked"`
}

// Errors is the number of findings of severity Error.
func (r *Report) Errors() int { return r.count(Error) }

// Warnings is the number of findings of severity Warning.
func (r *Report) Warnings() int { return r.count(Warning) }

func (r *Report) count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Failed reports whether the report fails a deployment gate: any error, or with strict any
// warning too.
func (r *Report) Failed(strict bool) bool {
	return r.Errors() > 0 || (strict && r.Warnings() > 0)
}

// Has reports whether the report holds a finding of check.
func (r *Report) Has(check string) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Check == check })
}

// run is one doctor run: its settings with the defaults filled in, and what it found.
type run struct {
	deps Deps
	cfg  Config
	rep  *Report
	// queue is what was read of the queue, nil when it was not (or could not be).
	queue *worker.Queue
}

func (r *run) add(f Finding) { r.rep.Findings = append(r.rep.Findings, f) }

func (r *run) checked(name string) { r.rep.Checked = append(r.rep.Checked, name) }

// Run checks the queue, its subscriptions and the database against the worker's settings. It
// changes nothing: it only reads queue attributes, lists subscriptions and runs read-only
// queries. What it cannot read becomes a finding. The error is for a cfg that does not validate
// or a ctx that ended.
func Run(ctx context.Context, deps Deps, cfg *Config) (*Report, error) {
	r := &run{deps: deps, cfg: *cfg, rep: &Report{Findings: []Finding{}}}
	if err := r.setDefaults(); err != nil {
		return nil, err
	}
	if deps.SQS != nil && r.cfg.Queue != "" {
		r.checkQueue(ctx)
		if deps.SNS != nil && r.queue != nil {
			r.checkSNS(ctx)
		}
	}
	if deps.Pool != nil {
		r.checkDatabase(ctx)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("doctor: %w", context.Cause(ctx))
	}
	r.rep.sort()
	return r.rep, nil
}

// Add adds a finding the caller made itself (a program that could not even open its database,
// say), keeping the errors first.
func (r *Report) Add(f Finding) {
	r.Findings = append(r.Findings, f)
	r.sort()
}

func (r *Report) sort() {
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Compare(rank(a.Severity), rank(b.Severity))
	})
}

func rank(s Severity) int {
	if s == Error {
		return 0
	}
	return 1
}

// setDefaults fills the zero fields of the settings as the worker and the inbox do.
func (r *run) setDefaults() error {
	c := &r.cfg
	w := &c.Worker
	w.HandlerTimeout = cmp.Or(w.HandlerTimeout, worker.DefaultHandlerTimeout)
	w.Concurrency = cmp.Or(w.Concurrency, worker.DefaultConcurrency)
	if w.HandlerBatch == 0 {
		w.HandlerBatch = worker.DefaultHandlerBatch
	}
	c.Inbox.Schema = cmp.Or(c.Inbox.Schema, inbox.DefaultSchema)
	c.Inbox.Retention = cmp.Or(c.Inbox.Retention, inbox.DefaultRetention)
	c.Inbox.PurgeInterval = cmp.Or(c.Inbox.PurgeInterval, inbox.DefaultPurgeInterval)
	c.OffloadThreshold = cmp.Or(c.OffloadThreshold, s3payload.DefaultThreshold)
	c.TypeAttribute = cmp.Or(c.TypeAttribute, "type")
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.Inbox.Retention < 0:
		return errors.New("doctor: Config.Inbox.Retention is negative")
	case c.OffloadThreshold < 0:
		return errors.New("doctor: Config.OffloadThreshold is negative")
	case c.PoolSize < 0:
		return errors.New("doctor: Config.PoolSize is negative")
	}
	return nil
}

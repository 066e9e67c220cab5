package reliability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// HandlerName is the inbox handler scope of the recording handler.
const HandlerName = "reliability"

// Client is the part of the SQS API the harness uses (the worker's, plus sends). An *sqs.Client
// satisfies it, and so does the in-process fake.
type Client interface {
	worker.SQSClient
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Env is what every scenario runs against: a PostgreSQL server, an SQS-compatible server, and
// a way to start worker processes.
type Env struct {
	// DB is the main PostgreSQL server (a throwaway cluster, or TEST_DATABASE_URL's server).
	DB *pgtest.Server
	// SQS is the SQS-compatible server.
	SQS *sqstest.Server
	// Command returns the command that runs one worker process (see [WorkerMain]); the
	// harness adds the worker's configuration to its environment.
	Command func() *exec.Cmd
	// Dir holds the delete logs and process outputs. Empty means a temporary directory.
	Dir string
	// Logf receives progress lines. nil means none.
	Logf func(format string, args ...any)
}

func (e *Env) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// Run is one scenario's world: a fresh schema (inbox, effects, totals, groups), a queue with a
// dead-letter queue, and a directory for the delete logs.
type Run struct {
	Env    *Env
	Name   string
	Schema string
	// DBURL is the database the workers use (the scenario may point it through a proxy, or at a
	// cluster of its own).
	DBURL string
	// Pool is the harness's own pool on DBURL's database, direct.
	Pool   *pgxpool.Pool
	Client Client
	// GoAws says Client is GoAws (its counts include in-flight messages).
	GoAws bool
	Queue *sqstest.Queue
	// FIFO says Queue is a FIFO queue.
	FIFO bool
	// Topic, if set (RunOptions.Topic), is an SNS topic Queue is subscribed to, enveloped; SNS
	// publishes to it.
	Topic *sqstest.Topic
	SNS   *sns.Client
	// Payloads, if set (RunOptions.Offload), puts offloaded payloads in PayloadBucket.
	Payloads      *s3payload.Writer
	PayloadBucket string
	AuditDir      string
	Started       time.Time
	// Size is the scenario's size (it scales the drain's deadline).
	Size Size
	// Log receives the in-process workers' warnings (in AuditDir/log.txt).
	Log *slog.Logger

	procs   Procs
	logFile *os.File
	// exactCounts says the server's counts are exact, not approximate (GoAws, fauxqs).
	exactCounts bool
	// What the DLQ read found odd, for the report's notes.
	dlqMismatch string
	dlqDupIDs   int
}

// RunOptions says how [Env.NewRun] sets up a run.
type RunOptions struct {
	// DB is the server to use; nil means Env.DB.
	DB *pgtest.Server
	// Client is the SQS client; nil means the server's (GoAws). Queue must then be set too.
	Client Client
	// Queue is the queue to use; nil means a new one on Env.SQS with Visibility and MaxReceive.
	Queue *sqstest.Queue
	// Visibility is the queue's visibility timeout. 0 means 5 s.
	Visibility time.Duration
	// MaxReceive is the redrive policy's maxReceiveCount. 0 means 10.
	MaxReceive int
	// FIFO makes the new queue (and its DLQ) FIFO queues.
	FIFO bool
	// Size is the scenario's size.
	Size Size
	// Topic makes an SNS topic on Env.SQS and subscribes the new queue to it without raw
	// message delivery: each message arrives in an SNS notification envelope, which the worker
	// unwraps (its default Config.SNS). Run.Topic and Run.SNS are then set.
	Topic bool
	// Offload makes a bucket on Env.SQS's S3 for offloaded payloads: Run.Payloads puts them
	// there, and the run's workers may fetch from it (WorkerConfig.PayloadBuckets).
	Offload bool
}

// NewRun creates a scenario's schema, tables and queue.
func (e *Env) NewRun(ctx context.Context, name string, o RunOptions) (*Run, error) {
	db := o.DB
	if db == nil {
		db = e.DB
	}
	r := &Run{Env: e, Name: name, Schema: "rel_" + randHex(5), DBURL: db.URL, Client: o.Client, Queue: o.Queue, Started: time.Now(), Size: o.Size, FIFO: o.FIFO}
	if r.Client == nil {
		r.Client = plainClient{e.SQS.Client()}
		r.GoAws = e.SQS.GoAws
		r.exactCounts = e.SQS.Kind == sqstest.KindGoAws || e.SQS.Kind == sqstest.KindFauxqs
	}
	dir := e.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	var err error
	if r.AuditDir, err = os.MkdirTemp(dir, "rel-"+name+"-"); err != nil {
		return nil, err
	}
	r.procs.Dir = r.AuditDir
	lf, err := os.Create(filepath.Join(r.AuditDir, "log.txt"))
	if err != nil {
		return nil, err
	}
	r.logFile = lf
	r.Log = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 8
	if r.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	if _, err := inbox.Migrate(ctx, r.Pool, r.Schema); err != nil {
		r.Pool.Close()
		return nil, fmt.Errorf("reliability: migrate: %w", err)
	}
	s := r.Schema
	for _, q := range []string{
		// No unique key: a second effect of the same event must show. body_sha is the SHA-256 of
		// the body the handler saw. On a FIFO queue, grp is the message group and grp_seq the
		// effect's place in its group's commit order.
		`CREATE TABLE ` + s + `.effects (key text NOT NULL, value text NOT NULL, worker text NOT NULL, attempt int NOT NULL,
			committed_at timestamptz NOT NULL DEFAULT clock_timestamp(), body_sha text, grp text, grp_seq bigint)`,
		// One counter per message group, taken in the effect's transaction: its row lock is held
		// until the commit, so within a group the numbers it hands out follow the commit order.
		`CREATE TABLE ` + s + `.groups (grp text PRIMARY KEY, n bigint NOT NULL)`,
		// The stacking business write: a second effect would also count twice here.
		`CREATE TABLE ` + s + `.totals (bucket int PRIMARY KEY, n bigint NOT NULL)`,
	} {
		if _, err := r.Pool.Exec(ctx, q); err != nil {
			r.Pool.Close()
			return nil, fmt.Errorf("reliability: %s: %w", q, err)
		}
	}
	if r.Queue == nil {
		vis := o.Visibility
		if vis == 0 {
			vis = 5 * time.Second
		}
		mr := o.MaxReceive
		if mr == 0 {
			mr = 10
		}
		if r.Queue, err = e.SQS.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "rel-" + name, VisibilityTimeout: vis, MaxReceiveCount: mr, FIFO: o.FIFO}); err != nil {
			r.Pool.Close()
			return nil, err
		}
	}
	if o.Topic {
		if err := r.subscribe(ctx); err != nil {
			r.Pool.Close()
			return nil, err
		}
	}
	if o.Offload {
		if err := r.payloadBucket(ctx); err != nil {
			r.Pool.Close()
			return nil, err
		}
	}
	return r, nil
}

// payloadBucket makes the run's bucket for offloaded payloads and its writer.
func (r *Run) payloadBucket(ctx context.Context) error {
	c, err := r.Env.SQS.S3Client(ctx)
	if err != nil {
		return err
	}
	if r.PayloadBucket, err = r.Env.SQS.CreateBucket(ctx, c, "rel-"+r.Name); err != nil {
		return err
	}
	r.Payloads, err = s3payload.NewWriter(s3payload.WriterConfig{S3: c, Bucket: r.PayloadBucket})
	return err
}

// subscribe makes the run's topic and subscribes its queue to it, enveloped.
func (r *Run) subscribe(ctx context.Context) error {
	c, err := r.Env.SQS.SNSClient(ctx)
	if err != nil {
		return err
	}
	tp, err := r.Env.SQS.CreateTopicErr(ctx, c, sqstest.TopicOptions{Prefix: "rel-" + r.Name})
	if err != nil {
		return err
	}
	if _, err := r.Env.SQS.SubscribeErr(ctx, c, tp.ARN, r.Queue.URL, sqstest.SubscribeOptions{Raw: false}); err != nil {
		return err
	}
	r.Topic, r.SNS = tp, c
	return nil
}

// Close ends the run's processes and its pool.
func (r *Run) Close() {
	r.procs.KillAll()
	r.Pool.Close()
	_ = r.logFile.Close()
}

// WorkerConfig returns the base configuration of a worker of this run.
func (r *Run) WorkerConfig(id string) WorkerConfig {
	return WorkerConfig{
		ID: id, DatabaseURL: r.DBURL, AuditDatabaseURL: r.DBURL, Schema: r.Schema, QueueURL: r.Queue.URL,
		AuditDir: r.AuditDir, Concurrency: 8, Logger: r.Log.With("worker", id), PayloadBuckets: r.payloadBuckets(),
	}
}

func (r *Run) payloadBuckets() []string {
	if r.PayloadBucket == "" {
		return nil
	}
	return []string{r.PayloadBucket}
}

// Count returns the messages in the queue at url: visible, in flight or delayed.
func (r *Run) Count(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := r.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, err
	}
	keys := []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"}
	if r.GoAws {
		keys = keys[:1] // GoAws counts in-flight messages in the first already
	}
	n := 0
	for _, k := range keys {
		v, _ := strconv.Atoi(out.Attributes[k])
		n += v
	}
	return n, nil
}

// Effects returns the number of effect rows.
func (r *Run) Effects(ctx context.Context) (int, error) {
	var n int
	err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects`).Scan(&n)
	return n, err
}

// WaitEffects waits until at least n effect rows exist, or timeout passes.
func (r *Run) WaitEffects(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := r.Effects(ctx)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			r.dumpGoroutines()
			if err != nil {
				return fmt.Errorf("reliability: %d effects after %v, waited for %d: %w", got, timeout, n, err)
			}
			dlq, _ := sqstest.Count(ctx, r.Client, r.Queue.DLQURL)
			left, _ := sqstest.Count(ctx, r.Client, r.Queue.URL)
			return fmt.Errorf("reliability: %d effects after %v, waited for %d (%d messages in the DLQ, %d in the queue; goroutines.txt in the audit directory)", got, timeout, n, dlq, left)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func auditPath(dir, worker string) string { return filepath.Join(dir, "deletes-"+worker+".jsonl") }

// plainClient passes [worker.PlainRequestBodies] on every call. Without it, the SDK can retry a
// ReceiveMessage whose response arrived but whose connection net/http closed under the reader
// (that option's doc says how): the messages of the lost response stay invisible for the whole
// visibility timeout, and a DLQ read misses them.
type plainClient struct{ c *sqs.Client }

func plain(optFns []func(*sqs.Options)) []func(*sqs.Options) {
	return append(optFns[:len(optFns):len(optFns)], worker.PlainRequestBodies)
}

func (p plainClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return p.c.ReceiveMessage(ctx, in, plain(optFns)...)
}

func (p plainClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return p.c.DeleteMessage(ctx, in, plain(optFns)...)
}

func (p plainClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return p.c.DeleteMessageBatch(ctx, in, plain(optFns)...)
}

func (p plainClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return p.c.ChangeMessageVisibility(ctx, in, plain(optFns)...)
}

func (p plainClient) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return p.c.ChangeMessageVisibilityBatch(ctx, in, plain(optFns)...)
}

func (p plainClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return p.c.GetQueueAttributes(ctx, in, plain(optFns)...)
}

func (p plainClient) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return p.c.GetQueueUrl(ctx, in, plain(optFns)...)
}

func (p plainClient) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return p.c.SendMessageBatch(ctx, in, plain(optFns)...)
}

// dumpGoroutines writes every goroutine's stack to goroutines.txt in the audit directory: when a
// scenario stalls, what its in-process workers were waiting on.
func (r *Run) dumpGoroutines() {
	f, err := os.Create(filepath.Join(r.AuditDir, "goroutines.txt"))
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 2)
}

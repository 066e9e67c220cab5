package reliability

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// EnvWorker names the environment variable that carries a worker process's configuration
// (JSON of [WorkerConfig]). [WorkerMain] reads it.
const EnvWorker = "SQSINBOX_RELIABILITY_WORKER"

// Worker modes.
const (
	// ModeNormal is the real thing: inboxhandler on the worker.
	ModeNormal = ""
	// ModeAckBeforeCommit is a deliberately broken worker for the checker's self-test: it deletes
	// each message before its transaction, and kills itself (SIGKILL) after the CrashAt-th such
	// delete, before that message's commit.
	ModeAckBeforeCommit = "ack-before-commit"
)

// WorkerConfig configures one worker of the harness, in a process of its own or in-process.
type WorkerConfig struct {
	// ID names the worker in effects and delete logs.
	ID string
	// DatabaseURL is the database the inbox uses (possibly through a fault proxy).
	DatabaseURL string
	// AuditDatabaseURL is the database the delete audit asks, directly. Empty means DatabaseURL.
	AuditDatabaseURL string
	Schema           string
	QueueURL         string
	// SQSEndpoint, if set, replaces the SQS endpoint (a fault proxy).
	SQSEndpoint string
	// AuditDir receives the delete log.
	AuditDir string
	// Concurrency is the worker's Config.Concurrency. 0 means 8.
	Concurrency int
	// MaxConns caps the worker's pool. 0 means pgxpool's default.
	MaxConns int32
	// Visibility is the worker's Config.VisibilityTimeout. 0 means the queue's.
	Visibility time.Duration
	// ShutdownTimeout is the worker's Config.ShutdownTimeout. 0 means 20 s.
	ShutdownTimeout time.Duration
	// JitterDelay is the longest random pause inside each transaction, after the claim (it widens
	// the windows that kills can land in). 0 means none.
	JitterDelay time.Duration
	// SlowDelay is a pause inside every transaction. 0 means none.
	SlowDelay time.Duration
	// Backoff is the redelivery delay after a failure. 0 means 1 s.
	Backoff time.Duration
	// HandlerTimeout is the worker's Config.HandlerTimeout. 0 means the worker's default (5 min).
	HandlerTimeout time.Duration
	// LockTimeout and IdleInTransactionTimeout are the inbox's Config fields of the same names.
	// 0 means the inbox's defaults (5 s and 1 min).
	LockTimeout, IdleInTransactionTimeout time.Duration
	// Mode is ModeNormal or ModeAckBeforeCommit.
	Mode string
	// CrashAt is the ack after which a ModeAckBeforeCommit worker kills itself. 0 means never.
	CrashAt int
	// HandlerBatch is the worker's Config.HandlerBatch: the most messages the inbox runs in one
	// transaction. 0 means the worker's default (10: the recording handler is a batch handler); 1
	// turns batching off.
	HandlerBatch int
	// Prefetch is the worker's Config.Prefetch. 0 means its default (Concurrency × HandlerBatch).
	Prefetch int
	// BatchLog makes the worker log every batch it opens and closes, in AuditDir (see
	// [ReadBatchLog]).
	BatchLog bool
	// PayloadBuckets, if set, gives the worker a fetcher of offloaded payloads (Config.Payloads:
	// an s3payload reader of these buckets, on the S3 endpoint of the AWS configuration, which
	// AWS_ENDPOINT_URL_S3 names under fauxqs). Empty means none: an offloaded message is refused.
	PayloadBuckets []string
	// Misbehave makes the recording handler misbehave with the transaction of some events, chosen
	// by key ([MisbehaviourOf]), on every delivery. It needs a HandlerTimeout (one misbehaviour
	// runs past it). false means the handler behaves.
	Misbehave bool

	// Wrap, in-process only, decorates the SQS client below the audit (fault injection).
	Wrap func(Client) Client `json:"-"`
	// Client, in-process only, replaces the SQS client (the fake).
	Client Client `json:"-"`
	// Metrics, in-process only, receives the worker's counters.
	Metrics worker.Metrics `json:"-"`
	// Logger, in-process only; nil means warnings to stderr.
	Logger *slog.Logger `json:"-"`
}

// Worker is a running worker of the harness.
type Worker struct {
	W     *worker.Worker
	Audit *Audit
	pool  *pgxpool.Pool
	blog  *batchLog
}

// Stop stops the worker gracefully and closes its pools.
func (w *Worker) Stop(ctx context.Context) error {
	err := w.W.Stop(ctx)
	w.pool.Close()
	w.Audit.Close()
	w.blog.Close()
	return err
}

// StartWorker starts a worker with the recording handler, its SQS client wrapped in the delete
// audit.
func StartWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.Misbehave && cfg.HandlerTimeout <= 0 {
		return nil, errors.New("reliability: WorkerConfig.Misbehave needs a HandlerTimeout")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("worker", cfg.ID)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	} else {
		pcfg.MaxConns = int32(cfg.Concurrency) + 2
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	ib, err := inbox.New(pool, &inbox.Config{Schema: cfg.Schema, Logger: log,
		LockTimeout: cfg.LockTimeout, IdleInTransactionTimeout: cfg.IdleInTransactionTimeout})
	if err != nil {
		pool.Close()
		return nil, err
	}
	var payloads worker.PayloadFetcher
	if len(cfg.PayloadBuckets) > 0 {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			pool.Close()
			return nil, err
		}
		if payloads, err = s3payload.NewReader(s3payload.ReaderConfig{S3: s3payload.NewClient(awsCfg), Buckets: cfg.PayloadBuckets}); err != nil {
			pool.Close()
			return nil, err
		}
	}
	base := cfg.Client
	if base == nil {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			pool.Close()
			return nil, err
		}
		base = sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
			if cfg.SQSEndpoint != "" {
				o.BaseEndpoint = aws.String(cfg.SQSEndpoint)
			}
			o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
			worker.PlainRequestBodies(o) // the worker passes it too; this covers the audit's own calls
		})
	}
	if cfg.Wrap != nil {
		base = cfg.Wrap(base)
	}
	auditURL := cfg.AuditDatabaseURL
	if auditURL == "" {
		auditURL = cfg.DatabaseURL
	}
	audit, err := NewAudit(ctx, base, auditURL, cfg.Schema, cfg.ID, auditPath(cfg.AuditDir, cfg.ID))
	if err != nil {
		pool.Close()
		return nil, err
	}
	h, err := inboxhandler.New(ib, HandlerName, nil, recordingFunc(cfg))
	if err != nil {
		pool.Close()
		audit.Close()
		return nil, err
	}
	rh := &recordingHandler{h: h, audit: audit, cfg: cfg}
	if cfg.BatchLog {
		if rh.blog, err = newBatchLog(cfg.AuditDir, cfg.ID); err != nil {
			pool.Close()
			audit.Close()
			return nil, err
		}
	}
	var wh worker.Handler = rh
	backoff := cfg.Backoff
	if backoff == 0 {
		backoff = time.Second
	}
	shutdown := cfg.ShutdownTimeout
	if shutdown == 0 {
		shutdown = 20 * time.Second
	}
	w, err := worker.New(audit, &worker.Config{
		QueueURL: cfg.QueueURL, Handler: wh, Concurrency: cfg.Concurrency, WaitTime: time.Second,
		VisibilityTimeout: cfg.Visibility, ShutdownTimeout: shutdown, HandlerTimeout: cfg.HandlerTimeout,
		Backoff: func(int) time.Duration { return backoff }, Logger: log, Metrics: cfg.Metrics,
		HandlerBatch: cfg.HandlerBatch, Prefetch: cfg.Prefetch, Payloads: payloads,
	})
	if err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		pool.Close()
		audit.Close()
		rh.blog.Close()
		return nil, err
	}
	return &Worker{W: w, Audit: audit, pool: pool, blog: rh.blog}, nil
}

// Body is the JSON body of the producer's good messages.
type Body struct {
	ID    string `json:"id,omitempty"`
	Value string `json:"value"`
	Seq   int64  `json:"seq"`
	Panic bool   `json:"panic,omitempty"`
	// Pad fills an offloaded payload up to its size (Event.Offload).
	Pad string `json:"pad,omitempty"`
}

// recordingFunc is the handler: an effect row and a stacking business write, in the inbox's
// transaction. The effect row records the SHA-256 of the body the handler saw, so that the
// checker can tell an offloaded event's payload from its pointer. A message of a FIFO group also
// takes the next number of its group's counter row into its effect row: the row stays locked
// until the transaction ends, so the numbers of the committed effects of a group follow their
// commit order.
//
// The stacking write goes to one of totalsBuckets counter rows. With 16 (as before batches), a
// batch of ten almost surely shared a row with every other batch in flight: batches, which hold
// their row locks until their one COMMIT, then ran one after another and deadlocked on the
// buckets (poison-bad-utf8-fake took 67 s batched against 13 s unbatched). That is the behaviour
// of hot rows under batching, which docs/how-it-works.md ("Handlers that batching slows") states; the suite is about exactly-once, so its
// counter is spread over enough rows that concurrent batches seldom meet.
//
// With WorkerConfig.Misbehave, an event whose class ([MisbehaviourOf]) fails misbehaves right
// after its effect row, without the stacking write; one that commits itself does so after both
// writes. And each key's stacking write gets a row of its own: a batch whose message overruns its
// handler timeout holds the rows its earlier messages wrote for that whole timeout, and with
// shared buckets a message of another batch that waited for one of them overran its own timeout
// (2 and 9 deliveries in two runs of 5,000 events), a failure that is the buckets', not the
// outcome table's.
func recordingFunc(cfg WorkerConfig) inboxhandler.Func {
	effects := `INSERT INTO ` + cfg.Schema + `.effects (key, value, worker, attempt, body_sha) VALUES ($1, $2, $3, $4, $5)`
	grouped := `WITH next AS (INSERT INTO ` + cfg.Schema + `.groups AS c (grp, n) VALUES ($6, 1)
			ON CONFLICT (grp) DO UPDATE SET n = c.n + 1 RETURNING n)
		INSERT INTO ` + cfg.Schema + `.effects (key, value, worker, attempt, body_sha, grp, grp_seq) SELECT $1, $2, $3, $4, $5, $6, n FROM next`
	const totalsBuckets = 4096
	totals := `INSERT INTO ` + cfg.Schema + `.totals (bucket, n) VALUES ($1, 1) ON CONFLICT (bucket) DO UPDATE SET n = totals.n + 1`
	return func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		key, _, _ := inbox.EventKey(ctx)
		mis := Behaves
		if cfg.Misbehave {
			mis = MisbehaviourOf(key)
		}
		if mis == CommitsItself {
			defer func() { _ = tx.Rollback(ctx) }() // the pgx idiom; a no-op after Commit
		}
		var b Body
		if err := json.Unmarshal(m.Body, &b); err != nil {
			return fmt.Errorf("reliability: body: %w", err)
		}
		if b.Panic {
			panic("reliability: poison message " + key)
		}
		if cfg.JitterDelay > 0 {
			if err := sleep(ctx, rand.N(cfg.JitterDelay)); err != nil {
				return err
			}
		}
		if cfg.SlowDelay > 0 {
			if err := sleep(ctx, cfg.SlowDelay); err != nil {
				return err
			}
		}
		sum := sha256.Sum256(m.Body) // the body the handler saw: an offloaded event's payload
		bodySHA := hex.EncodeToString(sum[:])
		var err error
		if m.GroupID != "" {
			_, err = tx.Exec(ctx, grouped, key, b.Value, cfg.ID, m.ReceiveCount, bodySHA, m.GroupID)
		} else {
			_, err = tx.Exec(ctx, effects, key, b.Value, cfg.ID, m.ReceiveCount, bodySHA)
		}
		if err != nil {
			return err
		}
		if mis.Fails() {
			return misbehave(ctx, tx, mis, cfg.HandlerTimeout)
		}
		h := fnv.New32a()
		_, _ = io.WriteString(h, key)
		bucket := int(h.Sum32() % totalsBuckets)
		if cfg.Misbehave {
			bucket = int(h.Sum32() >> 1) // a row per key, within the column's int range
		}
		if _, err = tx.Exec(ctx, totals, bucket); err != nil {
			return err
		}
		return misbehave(ctx, tx, mis, cfg.HandlerTimeout)
	}
}

// WorkerMain is the body of a worker process: it reads its [WorkerConfig] from [EnvWorker],
// runs until SIGTERM, stops gracefully, writes its counters (see [Proc.Counters]) and returns
// the process's exit code. It returns -1 when EnvWorker is not set. A process started with
// [EnvRelay] set instead is a relay process: WorkerMain runs [RelayMain].
func WorkerMain() int {
	if code := RelayMain(); code >= 0 {
		return code
	}
	raw := os.Getenv(EnvWorker)
	if raw == "" {
		return -1
	}
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "reliability worker:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	met := &counters{}
	cfg.Metrics = met
	w, err := StartWorker(ctx, cfg)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// SIGTERM came while the worker was starting (the run ended just after a restart):
		// nothing was processed, and like workerapp the process stops cleanly.
		fmt.Fprintln(os.Stderr, "reliability worker: stopped while starting", cfg.ID+":", err)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability worker:", err)
		return 2
	}
	fmt.Fprintln(os.Stderr, "reliability worker: started", cfg.ID)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = w.Stop(sctx)
	if raw, jerr := json.Marshal(met.snapshot()); jerr == nil {
		fmt.Fprintln(os.Stderr, countersPrefix+string(raw))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability worker: stop:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, "reliability worker: stopped", cfg.ID)
	return 0
}

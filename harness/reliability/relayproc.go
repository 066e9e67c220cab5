package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// EnvRelay names the environment variable that carries a relay process's configuration (JSON of
// [RelayProcConfig]). [WorkerMain] hands the process to [RelayMain] when it is set.
const EnvRelay = "SQSINBOX_RELIABILITY_RELAY"

// Relay modes.
const (
	// RelayNormal is the real thing: outbox.Relay.
	RelayNormal = ""
	// RelayStampBeforePublish is a deliberately broken relay for the checker's self-test: it
	// marks each claimed row sent before it publishes it, and kills itself (SIGKILL) after its
	// CrashAt-th such mark, before that claim's publish.
	RelayStampBeforePublish = "stamp-before-publish"
)

// RelayProcConfig configures one relay process of the harness.
type RelayProcConfig struct {
	// ID names the relay in its publish log.
	ID          string
	DatabaseURL string
	// Schema is the outbox's schema.
	Schema string
	// LogDir receives the publish log (publishes-ID.jsonl).
	LogDir string
	// Mode is RelayNormal or RelayStampBeforePublish.
	Mode string
	// CrashAt: a RelayNormal relay kills itself (SIGKILL) right after its CrashAt-th successful
	// SendMessageBatch returns, before the relay marks those rows sent: the window in which a
	// crash publishes an event twice. A RelayStampBeforePublish relay kills itself after its
	// CrashAt-th mark, before the publish. 0 means never.
	CrashAt int
	// PublishTimeout and Lease are the relay's RelayConfig fields; 0 means 2 s and 4 s.
	PublishTimeout, Lease time.Duration
}

// PublishRecord is one line of a relay's publish log: one message the SQS server said it
// stored. A relay killed after the call returned and before the line was written leaves no
// line, so the log can only undercount.
type PublishRecord struct {
	Relay     string `json:"relay"`
	EventID   string `json:"event"`
	MessageID string `json:"msg"`
}

// RelayMain is the body of a relay process: it reads its [RelayProcConfig] from [EnvRelay],
// relays until SIGTERM, stops gracefully and returns the process's exit code. It returns -1 when
// EnvRelay is not set.
func RelayMain() int {
	raw := os.Getenv(EnvRelay)
	if raw == "" {
		return -1
	}
	var cfg RelayProcConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "reliability relay:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runRelay(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "reliability relay:", err)
		return 3
	}
	fmt.Fprintln(os.Stderr, "reliability relay: stopped", cfg.ID)
	return 0
}

func runRelay(ctx context.Context, cfg RelayProcConfig) error {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(cfg.LogDir, "publishes-"+cfg.ID+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	c := &loggingSender{next: sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}), id: cfg.ID, log: f}
	if cfg.Mode == RelayNormal {
		c.crashAt = cfg.CrashAt
	}
	fmt.Fprintln(os.Stderr, "reliability relay: started", cfg.ID)
	if cfg.Mode == RelayStampBeforePublish {
		return stampBeforePublish(ctx, pool, c, cfg)
	}
	pt := cmpOr(cfg.PublishTimeout, 2*time.Second)
	rl, err := outbox.NewRelay(pool, &outbox.RelayConfig{
		Schema: cfg.Schema, SQS: c, Senders: 2, ClaimSize: 10, PollInterval: 100 * time.Millisecond,
		PublishTimeout: pt, Lease: cmpOr(cfg.Lease, 2*pt), MaxAttempts: 1000,
		BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("relay", cfg.ID),
	})
	if err != nil {
		return err
	}
	if err := rl.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return rl.Stop(sctx)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// loggingSender writes a line per stored message to the publish log, and kills the process
// after its crashAt-th successful call.
type loggingSender struct {
	next    outbox.SQSClient
	id      string
	crashAt int
	mu      sync.Mutex
	calls   int
	log     *os.File
}

func (s *loggingSender) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := s.next.SendMessageBatch(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	var lines []byte
	for _, ok := range out.Successful {
		i, aerr := strconv.Atoi(aws.ToString(ok.Id))
		if aerr != nil || i < 0 || i >= len(in.Entries) {
			continue
		}
		ev := aws.ToString(in.Entries[i].MessageAttributes[outbox.EventIDAttribute].StringValue)
		line, _ := json.Marshal(PublishRecord{Relay: s.id, EventID: ev, MessageID: aws.ToString(ok.MessageId)})
		lines = append(append(lines, line...), '\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.log.Write(lines) // one write: to the kernel, so it survives the SIGKILL below
	s.calls++
	if s.calls == s.crashAt {
		// Published, not yet marked sent: the relay's one gap.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return out, nil
}

// stampBeforePublish is the broken relay: it marks up to ten rows sent in one statement, then
// publishes them; after its CrashAt-th mark it kills itself instead, and those rows are never
// published.
func stampBeforePublish(ctx context.Context, pool *pgxpool.Pool, c *loggingSender, cfg RelayProcConfig) error {
	t := cfg.Schema + ".outbox_messages"
	q := `UPDATE ` + t + ` SET sent_at = now() WHERE id IN (SELECT id FROM ` + t + `
		WHERE sent_at IS NULL ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
		RETURNING event_id, destination, body, attributes`
	type attr struct{ DataType, StringValue string }
	marks := 0
	for ctx.Err() == nil {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			return ignoreStop(ctx, err)
		}
		var dest string
		var entries []types.SendMessageBatchRequestEntry
		for rows.Next() {
			var ev, body string
			var attrs map[string]attr
			if err := rows.Scan(&ev, &dest, &body, &attrs); err != nil {
				rows.Close()
				return err
			}
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(entries))), MessageBody: aws.String(body),
				MessageAttributes: map[string]types.MessageAttributeValue{
					outbox.EventIDAttribute: {DataType: aws.String("String"), StringValue: aws.String(ev)}}}
			for k, a := range attrs {
				e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(a.StringValue)}
			}
			entries = append(entries, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(entries) == 0 {
			_ = sleep(ctx, 100*time.Millisecond) // ends early at SIGTERM, and so does the loop
			continue
		}
		if marks++; marks == cfg.CrashAt {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(dest), Entries: entries}, worker.PlainRequestBodies); err != nil {
			return fmt.Errorf("publish (its rows are already marked sent): %w", err)
		}
	}
	return nil
}

// ignoreStop returns err, or nil once ctx (the process's SIGTERM) has ended.
func ignoreStop(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// StartRelay starts a relay process of the run (see [RelayMain]).
func (r *Run) StartRelay(cfg RelayProcConfig) (*Proc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return r.startProc(WorkerConfig{ID: cfg.ID}, EnvRelay+"="+string(raw))
}

// ReadPublishLogs reads every relay's publish log in dir.
func ReadPublishLogs(dir string) ([]PublishRecord, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "publishes-*.jsonl"))
	if err != nil {
		return nil, err
	}
	var out []PublishRecord
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var rec PublishRecord
			if json.Unmarshal(line, &rec) == nil { // a partial last line was never complete
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/worker"
)

// dbFlags are the database flags shared by the commands that use PostgreSQL.
type dbFlags struct {
	url    string
	schema string
}

func (d *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.url, "database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&d.schema, "schema", "sqsinbox", "schema of the inbox's tables")
}

// connect opens a pool and checks that the server answers, so an unreachable database is one
// clear line at once.
func (d *dbFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	u := d.url
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	if u == "" {
		return nil, fmt.Errorf("%w: no database: set --database-url or DATABASE_URL", errUsage)
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		// The parse error can quote the URL, password included: say only what is wrong.
		return nil, fmt.Errorf("%w: the database URL does not parse (check --database-url or DATABASE_URL)", errUsage)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s:%d unreachable: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// awsConfig loads the standard AWS configuration chain (AWS_REGION, AWS_PROFILE, the
// credentials, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>) and requires a region.
func awsConfig(ctx context.Context) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("%w: no AWS region: set AWS_REGION (or a profile with a region)", errUsage)
	}
	return cfg, nil
}

// sqsClient builds an SQS client from the standard AWS configuration chain, including
// AWS_ENDPOINT_URL_SQS, with the worker's request-body guard.
func sqsClient(ctx context.Context) (*sqs.Client, error) {
	cfg, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return newSQS(cfg), nil
}

func newSQS(cfg aws.Config) *sqs.Client { return sqs.NewFromConfig(cfg, worker.PlainRequestBodies) }

// queueURL resolves a queue given by URL or by name.
func queueURL(ctx context.Context, c *sqs.Client, q string) (string, error) {
	if q == "" {
		return "", fmt.Errorf("%w: no queue given", errUsage)
	}
	if strings.HasPrefix(q, "https://") || strings.HasPrefix(q, "http://") {
		return q, nil
	}
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		return "", fmt.Errorf("queue %q: %s", q, apiError(err))
	}
	return aws.ToString(out.QueueUrl), nil
}

// apiError shortens an SDK error to its service code and message.
func apiError(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
			return "does not exist"
		}
		return ae.ErrorCode() + ": " + ae.ErrorMessage()
	}
	return err.Error()
}

// parseAge parses a duration that may be given in days ("14d") as well as Go's units.
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%w: %q is not a duration such as 14d or 336h", errUsage, s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: %q is not a duration such as 14d or 336h", errUsage, s)
	}
	return v, nil
}

// durationText shows whole days as "14d" (the form --older-than takes) and anything else as Go
// does.
func durationText(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// isTerminal reports whether w is a terminal, where progress is redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress redraws one line on a terminal at most every 100 ms, and says nothing otherwise.
type progress struct {
	w    io.Writer
	on   bool
	last time.Time
}

func newProgress(w io.Writer) *progress { return &progress{w: w, on: isTerminal(w)} }

func (p *progress) update(format string, args ...any) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K"+format, args...)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/worker"
)

// dbFlags are the database flags shared by the commands that use PostgreSQL.
type dbFlags struct {
	url    string
	schema string
}

func (d *dbFlags) register(fs *flags) {
	fs.StringVar(&d.url, "database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&d.schema, "schema", "sqsinbox", "schema of the inbox's tables")
}

// connect opens a pool and checks that the server answers, so an unreachable database is one
// clear line at once. timeout (0: none) bounds connecting and, as the sessions'
// statement_timeout, each statement.
func (d *dbFlags) connect(ctx context.Context, timeout time.Duration) (*pgxpool.Pool, error) {
	cfg, err := d.poolConfig(timeout)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, connectError(err, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))), timeout)
	}
	return pool, nil
}

// poolConfig parses --database-url (or DATABASE_URL) into a pool of 4 connections whose
// connecting and statements timeout bounds (0: none).
func (d *dbFlags) poolConfig(timeout time.Duration) (*pgxpool.Config, error) {
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
	if timeout > 0 {
		if cc := &cfg.ConnConfig.Config; cc.ConnectTimeout == 0 || cc.ConnectTimeout > timeout {
			cc.ConnectTimeout = timeout
		}
		if _, set := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !set {
			cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(timeout.Milliseconds(), 10)
		}
	}
	return cfg, nil
}

// withTimeout is context.WithTimeout, or no deadline when d is 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// connectError says why PostgreSQL at addr could not be used: what the server said (its
// message and SQLSTATE, such as 28P01 for a wrong password or 3D000 for a missing database),
// that it did not answer in time, or that it could not be reached.
func connectError(err error, addr string, timeout time.Duration) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		hint := map[string]string{
			"28P01": "check the user and password in --database-url or DATABASE_URL (or ~/.pgpass)",
			"28000": "check the user name, and the server's pg_hba.conf",
			"3D000": "check the database name in --database-url or DATABASE_URL, or create the database",
			"53300": "the server has no free connection slots; try again later",
		}[pgErr.Code]
		if hint != "" {
			hint = "; " + hint
		}
		return fmt.Errorf("PostgreSQL at %s: %s (SQLSTATE %s)%s", addr, pgErr.Message, pgErr.Code, hint)
	case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("PostgreSQL at %s did not answer within %v (--timeout)", addr, timeout)
	}
	return fmt.Errorf("PostgreSQL at %s unreachable: %w", addr, err)
}

// awsConfig loads the standard AWS configuration chain (AWS_REGION, AWS_PROFILE, the
// credentials, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>), requires a region and
// resolves the credentials up front, within timeout, so that missing ones are one clear error
// rather than the SDK's chain of wrappers from the first call.
func awsConfig(ctx context.Context, timeout time.Duration) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("%w: no AWS region: set AWS_REGION (or a profile with a region)", errUsage)
	}
	cctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		if ctx.Err() != nil {
			return aws.Config{}, err
		}
		return aws.Config{}, credentialsError(err, timeout)
	}
	return cfg, nil
}

// credentialsError names the places the SDK looked for credentials. The SDK falls back to the
// EC2 instance metadata service only when nothing else is configured, so a failure there means
// none of the others held credentials; the SDK offers no typed error for that, hence the text.
func credentialsError(err error, timeout time.Duration) error {
	if !strings.Contains(err.Error(), "EC2 IMDS") {
		return fmt.Errorf("AWS credentials: %w", err)
	}
	why := "no role found there"
	if errors.Is(err, context.DeadlineExceeded) {
		why = fmt.Sprintf("no answer within %v", timeout)
	}
	return errors.New("no AWS credentials found; tried the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), " +
		"the shared config and credentials files (AWS_PROFILE, ~/.aws/config, ~/.aws/credentials), web identity " +
		"(AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI " +
		"or _RELATIVE_URI) and the EC2 instance metadata service (" + why + ")")
}

// sqsClient builds an SQS client from the standard AWS configuration chain, including
// AWS_ENDPOINT_URL_SQS, with the worker's request-body guard and timeout on each call.
func sqsClient(ctx context.Context, timeout time.Duration) (*sqs.Client, error) {
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return nil, err
	}
	return newSQS(cfg, timeout), nil
}

func newSQS(cfg aws.Config, timeout time.Duration) *sqs.Client {
	return sqs.NewFromConfig(cfg, worker.PlainRequestBodies, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, callTimeout("SQS", endpointOf(*o), timeout))
	})
}

// sqsEndpoint is the endpoint c calls, for messages.
func sqsEndpoint(c *sqs.Client) string { return endpointOf(c.Options()) }

// endpointOf is the configured endpoint (AWS_ENDPOINT_URL_SQS, ...) or the region's AWS one.
func endpointOf(o sqs.Options) string {
	if ep := aws.ToString(o.BaseEndpoint); ep != "" {
		return ep
	}
	return "https://sqs." + o.Region + ".amazonaws.com"
}

// timeoutError is a call that got no answer within --timeout.
type timeoutError struct {
	service, endpoint string
	timeout           time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("%s at %s did not answer within %v (--timeout)", e.service, e.endpoint, e.timeout)
}

// callTimeout bounds each call of a client, its retries included, to d (0: no bound), and turns
// running out of it into a *timeoutError that names the endpoint.
func callTimeout(service, endpoint string, d time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		if d <= 0 {
			return nil
		}
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sqsinboxCallTimeout",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				cctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				out, md, err := next.HandleInitialize(cctx, in)
				if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
					err = &timeoutError{service: service, endpoint: endpoint, timeout: d}
				}
				return out, md, err
			}), middleware.Before)
	}
}

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
	var (
		ae smithy.APIError
		te *timeoutError
	)
	if errors.As(err, &te) {
		return te.Error()
	}
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

// plural is "1 row", "2 rows", "3 batches".
func plural(n int, unit string) string {
	switch {
	case n == 1:
		return "1 " + unit
	case strings.HasSuffix(unit, "ch") || strings.HasSuffix(unit, "s") || strings.HasSuffix(unit, "x"):
		return fmt.Sprintf("%d %ses", n, unit)
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// durationText shows whole days as "14d" (the form --older-than takes) and anything else as Go
// does.
func durationText(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// ageText shows an age as an operator reads it, steady while a command runs: whole days from two
// days up, whole minutes from an hour, whole seconds below.
func ageText(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", (d+12*time.Hour)/(24*time.Hour))
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// isTerminal reports whether f (a reader or writer) is a terminal, where progress is redrawn in
// place and a person can answer a question.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
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

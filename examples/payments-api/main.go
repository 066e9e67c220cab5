// Command payments-api is an HTTP API whose POST /payments is made safe to retry with the
// Idempotency-Key header, by sqsinbox's inbox/idempotency middleware. Each payment it creates
// writes a PaymentCaptured event through the outbox, in the request's transaction; the server
// runs the outbox's relay, which publishes the events to SQS or SNS; and `payments-api worker`
// books each one in a ledger through the inbox. See README.md.
//
// Usage:
//
//	payments-api migrate   apply the inbox's, the outbox's and the example's migrations
//	payments-api           serve on LISTEN_ADDR and relay the events, until SIGTERM or SIGINT
//	payments-api worker    book PaymentCaptured events in the ledger, until SIGTERM or SIGINT
//
// Environment: DATABASE_URL (else the libpq variables PGHOST, PGDATABASE or PGSERVICE must say
// where the database is), LISTEN_ADDR (default 127.0.0.1:8080), EVENTS_DESTINATION (the SQS
// queue URL or SNS topic ARN PaymentCaptured goes to), QUEUE_URL or QUEUE_NAME (the worker's
// queue; default payments-ledger), RELAY_LEASE (how long the relay holds the rows it claims;
// default 1m), and the standard AWS variables.
package main

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

//go:embed migrations/*.sql
var migrations embed.FS

const (
	// appSchema holds the example's own tables; its migrations are recorded in versionTable.
	appSchema    = "public"
	versionTable = "payments_api_migrations"
	// defaultListenAddr is used when LISTEN_ADDR is empty.
	defaultListenAddr = "127.0.0.1:8080"
	// shutdownTimeout bounds the graceful stop: in-flight requests get this long to finish.
	shutdownTimeout = 30 * time.Second
)

const usage = `usage: payments-api [migrate | worker]

  payments-api migrate   apply the inbox's, the outbox's and the example's migrations, then exit
  payments-api           serve the API and relay its events until SIGTERM or SIGINT, then stop
                         gracefully
  payments-api worker    book each PaymentCaptured in the ledger, through the inbox, until
                         SIGTERM or SIGINT

environment:
  DATABASE_URL        PostgreSQL connection string; else the libpq variables PGHOST, PGDATABASE
                      or PGSERVICE (with PGPORT, PGUSER, PGPASSWORD, ...) must say where it is
  LISTEN_ADDR         address to listen on (default 127.0.0.1:8080)
  EVENTS_DESTINATION  the SQS queue URL or SNS topic ARN that PaymentCaptured events go to
                      (required to serve)
  QUEUE_URL           the worker's queue; else QUEUE_NAME, else the queue named payments-ledger
  RELAY_LEASE         how long the relay holds the rows it claims, and so how long the rows of
                      a relay that died wait for the next (default 1m; the publish timeout is half)
  LOG_LEVEL           debug, info (default), warn or error
  AWS_REGION, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_SNS, AWS_PROFILE, ...: the standard AWS
                      configuration
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var level slog.Level
	if err := level.UnmarshalText([]byte(cmp.Or(os.Getenv("LOG_LEVEL"), "info"))); err != nil {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, log, nil)
	stop()
	if errors.Is(err, errUsage) {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		log.Error("payments-api: " + err.Error())
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// run is the whole program: it serves until ctx ends, applies the migrations (`migrate`), or
// runs the ledger worker (`worker`). ready, when set, is told the address once the server
// listens.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, log *slog.Logger, ready func(net.Addr)) error {
	migrateOnly := len(args) == 1 && args[0] == "migrate"
	if len(args) == 1 && args[0] == "worker" {
		return workerapp.Run(ctx, ledgerSpec(), workerapp.Options{Getenv: getenv, Logger: log})
	}
	if len(args) > 0 && !migrateOnly {
		return errUsage
	}
	pool, err := workerapp.Connect(ctx, getenv, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if migrateOnly {
		return migrateAll(ctx, pool, stdout)
	}
	lease, err := relayLease(getenv("RELAY_LEASE"))
	if err != nil {
		return err
	}
	return serve(ctx, pool, cmp.Or(getenv("LISTEN_ADDR"), defaultListenAddr), getenv("EVENTS_DESTINATION"), lease, log, ready)
}

// relayLease parses RELAY_LEASE: how long the relay holds the rows it claims (and so how long
// the rows of a relay that died holding them wait), "" for the outbox's default. The publish
// timeout is half of it.
func relayLease(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 2*time.Millisecond || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("RELAY_LEASE is %q: it must be a duration of whole milliseconds, such as 10s", v)
	}
	return d, nil
}

func appMigrator(pool *pgxpool.Pool) (*migrate.Migrator, error) {
	return migrate.New(pool, migrations, "migrations", appSchema, versionTable)
}

func migrateAll(ctx context.Context, pool *pgxpool.Pool, out io.Writer) error {
	done, err := inbox.Migrate(ctx, pool, inbox.DefaultSchema)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "inbox (schema %s): applied %v\n", inbox.DefaultSchema, done)
	if done, err = outbox.Migrate(ctx, pool, outbox.DefaultSchema); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "outbox (schema %s): applied %v\n", outbox.DefaultSchema, done)
	if done, err = migrateApp(ctx, pool); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "payments-api (schema %s): applied %v\n", appSchema, done)
	return nil
}

// migrateApp applies the example's own migrations (migrations/).
func migrateApp(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	mg, err := appMigrator(pool)
	if err != nil {
		return nil, err
	}
	return mg.Up(ctx)
}

func serve(ctx context.Context, pool *pgxpool.Pool, addr, events string, lease time.Duration, log *slog.Logger, ready func(net.Addr)) error {
	if events == "" {
		return errors.New("EVENTS_DESTINATION is not set: it names the SQS queue URL or SNS topic ARN that PaymentCaptured events go to")
	}
	if _, err := outbox.ParseDestination(events); err != nil {
		return fmt.Errorf("EVENTS_DESTINATION: %w", err)
	}
	mw, err := idempotency.New(pool, &idempotency.Config{Principal: clientID, Logger: log})
	if err != nil {
		return err
	}
	if err := mw.Check(ctx); err != nil {
		return fmt.Errorf("%w (run `payments-api migrate`)", err)
	}
	mg, err := appMigrator(pool)
	if err != nil {
		return err
	}
	if err := mg.CheckCurrent(ctx); err != nil {
		return fmt.Errorf("%w (run `payments-api migrate`)", err)
	}
	ob, err := outbox.New(pool, &outbox.Config{Logger: log})
	if err != nil {
		return err
	}
	if err := ob.Check(ctx); err != nil {
		return fmt.Errorf("%w (run `payments-api migrate`)", err)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load the AWS configuration: %w", err)
	}
	// The relay runs in this process: it publishes the events that committed transactions
	// wrote, and marks them sent. Several replicas may each run one; they never hold the same
	// row at once.
	relay, err := outbox.NewRelay(pool, &outbox.RelayConfig{SQS: sqs.NewFromConfig(awsCfg), SNS: sns.NewFromConfig(awsCfg), Logger: log,
		Lease: lease, PublishTimeout: (lease / 2).Truncate(time.Millisecond)})
	if err != nil {
		return err
	}
	api := &api{pool: pool, log: log, events: events}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.RequireKey(http.HandlerFunc(api.create)))
	mux.HandleFunc("GET /payments/{id}", api.get)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	log.Info("payments-api listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr())
	}

	purgeCtx, stopPurge := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = mw.PurgeLoop(purgeCtx) })
	wg.Go(func() { _ = ob.PurgeLoop(purgeCtx) })
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- srv.Serve(ln) })

	var err2 error
	select {
	case <-ctx.Done():
		log.Info("payments-api stopping: finishing requests in flight", "timeout", shutdownTimeout)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		err2 = srv.Shutdown(sctx)
		cancel()
	case err2 = <-serveErr:
	}
	stopPurge()
	wg.Wait()
	if errors.Is(err2, http.ErrServerClosed) {
		err2 = nil
	}
	// After the requests: the events they committed are published now, or by the next start.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	err2 = errors.Join(err2, relay.Stop(rctx))
	cancel()
	log.Info("payments-api stopped")
	return err2
}

// clientID identifies the client by its X-Client-Id header. It is a stand-in for real
// authentication (an API key, an OAuth token's subject): this function is where that plugs in.
// Idempotency keys are scoped by what it returns.
func clientID(r *http.Request) (string, error) {
	id := r.Header.Get("X-Client-Id")
	if id == "" {
		return "", errors.New("no X-Client-Id header")
	}
	return id, nil
}

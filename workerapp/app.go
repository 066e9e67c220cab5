// Package workerapp is the supported way to build an inbox worker program for ECS or EC2: your
// main is one call to [Main] with a [Spec] (your handler's name, your migrations, your handler,
// and your worker settings if the defaults do not fit), and workerapp does the rest: the
// configuration from the environment (the database, the queue, the worker's settings), JSON logs,
// Prometheus metrics and health endpoints, the `migrate`, `healthcheck` and `doctor` subcommands
// (doctor: package doctor's checks against the program's own settings), and a worker that runs
// until SIGTERM or SIGINT and then stops within ECS's stop timeout.
// terraform/examples/ecs-worker runs such a program; the README's first worker
// (examples/firstworker) and the examples (examples/warehouse, loyalty, payments) are built this
// way. Programs that want their own plumbing use worker, inbox and inboxhandler directly;
// docs/deploying.md says what such a main must do to run in that task definition.
//
// # The environment (the contract of a program built with Main)
//
//	DATABASE_URL    PostgreSQL connection string; else the libpq variables PGHOST, PGDATABASE
//	                or PGSERVICE (with PGPORT, PGUSER, PGPASSWORD, ...) must say where it is.
//	                pool_max_conns in it sets the pool's size (default: Concurrency + 2)
//	DATABASE_WAIT   how long a worker (or `migrate`) started while the database cannot be
//	                reached waits for it, trying again every 2 s at most, before it exits 1
//	                (default 5m, [DefaultDatabaseWait]; 0 does not wait)
//	INBOX_RETENTION how long the inbox remembers a processed event (default 672h,
//	                inbox.DefaultRetention); the worker refuses to start below the queue's
//	                redelivery horizon
//	QUEUE_URL       the queue's URL; else QUEUE_NAME, else the queue named as the Spec
//	QUEUE_NAME      the queue's name, looked up at start
//	LOG_LEVEL       debug, info (default), warn or error
//	METRICS_ADDR    serve Prometheus metrics at http://METRICS_ADDR/metrics, with /livez and
//	                /readyz beside them (default: none)
//	HEALTH_ADDR     serve /livez and /readyz at HEALTH_ADDR (default: none)
//	AWS_REGION, AWS_ENDPOINT_URL_SQS, AWS_PROFILE, ...: the standard AWS configuration
//
// # Worker settings
//
// The worker's settings are the worker package's defaults, changed in code by [Spec].Worker and
// then by these variables, which override the code (durations in Go syntax: "30s", "5m"):
//
//	CONCURRENCY         worker.Config.Concurrency (default 10)
//	MAX_PER_GROUP       worker.Config.MaxPerGroup (default 0: no cap)
//	HANDLER_BATCH       worker.Config.HandlerBatch, 1 to 20 (default 10)
//	PREFETCH            worker.Config.Prefetch; 0 means none (default: CONCURRENCY x HANDLER_BATCH)
//	VISIBILITY_TIMEOUT  worker.Config.VisibilityTimeout, whole seconds (default: the queue's)
//	HANDLER_TIMEOUT     worker.Config.HandlerTimeout (default 5m)
//	SHUTDOWN_TIMEOUT    worker.Config.ShutdownTimeout (default 20s, [StopTimeout])
//	MAX_HOLD            worker.Config.MaxHold (default 30s)
//
// A value that does not parse, or that the worker would refuse, stops the program at start with
// an error that names the variable (`CONCURRENCY="abc": not a whole number`). The worker's
// `worker: started` log line shows every effective value. `PROGRAM -h` prints all of this. The
// shutdown budget is the ShutdownTimeout, then [HardStopTimeout].
package workerapp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Shutdown budget. ECS sends SIGTERM and, 30 s later (its default stopTimeout), SIGKILL. The
// worker lets in-flight handlers finish for StopTimeout (the worker's own default), then cancels
// them; HardStopTimeout bounds what is left (rolling back, releasing messages).
const (
	StopTimeout     = worker.DefaultShutdownTimeout
	HardStopTimeout = worker.HardStopTimeout
)

// DefaultConcurrency is the number of handler calls a program runs at once unless [Spec].Worker
// or CONCURRENCY says otherwise: the worker's own default. For the inbox handler each call is a
// batch of up to worker.DefaultHandlerBatch messages, a transaction on a connection of its own.
const DefaultConcurrency = worker.DefaultConcurrency

// Spec describes one worker program.
type Spec struct {
	// Name is the program's name: its handler's name in the inbox, its default queue name, and
	// the prefix of its log lines.
	Name string
	// Migrate applies the program's own migrations (the inbox's are applied first). nil means
	// none.
	Migrate func(ctx context.Context, pool *pgxpool.Pool) ([]int, error)
	// Handler builds the worker's handler.
	Handler func(ctx context.Context, d *Deps) (worker.Handler, error)
	// Worker, when set, changes the worker's settings in code (Concurrency, MaxPerGroup,
	// VisibilityTimeout, ...). The environment's worker settings (CONCURRENCY, ...; see the
	// package's doc) override what it sets. The queue, Handler, Logger, Metrics and Payloads are
	// workerapp's to fill unless it sets them. nil keeps the defaults.
	Worker func(*worker.Config)
}

// Deps is what [Spec.Handler] gets to build a handler with.
type Deps struct {
	Pool   *pgxpool.Pool
	Inbox  *inbox.Inbox
	Logger *slog.Logger
	// Getenv reads the program's environment.
	Getenv func(string) string

	mu     sync.Mutex
	onStop []func()
}

// OnStop registers f to run after the worker has stopped, in reverse order of registration.
func (d *Deps) OnStop(f func()) {
	d.mu.Lock()
	d.onStop = append(d.onStop, f)
	d.mu.Unlock()
}

func (d *Deps) stop() {
	d.mu.Lock()
	fs := d.onStop
	d.onStop = nil
	d.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Options are what [Run] reads instead of the process's globals. Tests set them; [Main] fills
// them from the process.
type Options struct {
	// Args are the command-line arguments after the program name.
	Args []string
	// Getenv reads the environment. nil means os.Getenv.
	Getenv func(string) string
	// Logger receives the logs. nil means slog.Default().
	Logger *slog.Logger
	// Worker is the template of the worker's configuration, before [Spec].Worker and the
	// environment's worker settings: QueueURL, QueueName, Handler and Logger are filled in. Zero
	// fields get the worker's defaults.
	Worker worker.Config
	// Started, when set, is called once the worker runs.
	Started func(*worker.Worker)
	// Stdout receives the report of `doctor`. nil means os.Stdout.
	Stdout io.Writer
}

// Main runs the program as a process: it reads os.Args and the environment, logs JSON lines to
// stderr, stops on SIGTERM or SIGINT, and exits non-zero on failure.
func Main(spec Spec) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := NewLogger(os.Stderr, os.Getenv("LOG_LEVEL"))
	slog.SetDefault(log)
	err := Run(ctx, spec, Options{Args: os.Args[1:], Logger: log})
	stop()
	if errors.Is(err, errHelp) {
		fmt.Print(usage(spec.Name))
		return
	}
	if errors.Is(err, errUsage) {
		fmt.Fprint(os.Stderr, usage(spec.Name))
		os.Exit(2)
	}
	if err != nil {
		log.Error(spec.Name + ": " + err.Error())
		os.Exit(1)
	}
}

// NewLogger returns a JSON logger at level ("debug", "info", "warn", "error"; empty means info).
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(cmp.Or(level, "info"))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

var (
	errUsage = errors.New("usage")
	errHelp  = errors.New("help")
)

func usage(name string) string {
	return fmt.Sprintf(`usage: %[1]s [migrate | healthcheck | doctor [--json] [--strict] [--no-sns] [--no-kms]]

  %[1]s migrate       apply the inbox's migrations and this program's own, then exit
  %[1]s healthcheck   ask the running worker's /livez (HEALTH_ADDR, else METRICS_ADDR);
                  exit 0 if it is alive: ECS's container health check, without curl
  %[1]s doctor        check the queue, its DLQ and subscriptions, and the database against
                  this program's settings; change nothing; exit 1 on an error (--strict:
                  on a warning too), --json for a pipeline
  %[1]s               run the worker until SIGTERM or SIGINT, then stop gracefully

environment:
  DATABASE_URL    PostgreSQL connection string; else the libpq variables PGHOST, PGDATABASE
                  or PGSERVICE (with PGPORT, PGUSER, PGPASSWORD, ...) must say where it is
  DATABASE_WAIT   how long to wait at start for a database that cannot be reached (a
                  failover, a restart), trying again every 2 s at most (default 5m; 0: no wait)
  INBOX_RETENTION how long processed events are remembered (default 672h, 28 days); the
                  worker refuses to start below the queue's redelivery horizon
  QUEUE_URL       the queue's URL; else QUEUE_NAME, else the queue named %[1]q
  QUEUE_NAME      the queue's name, looked up at start
  LOG_LEVEL       debug, info (default), warn or error
  METRICS_ADDR    serve Prometheus metrics at http://METRICS_ADDR/metrics, with /livez and
                  /readyz beside them (default: none)
  HEALTH_ADDR     serve /livez (alive, even in a database outage: for ECS's health check) and
                  /readyz (running and not paused) at HEALTH_ADDR (default: none)
  SQSINBOX_PAYLOAD_BUCKETS  comma-separated S3 buckets from which the worker fetches payloads
                  offloaded in AWS's extended-client format (default: none; such messages
                  then go to the DLQ)
  SQSINBOX_PAYLOAD_MAX_BYTES  the largest payload fetched (default 67108864, 64 MiB)
  AWS_REGION, AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_S3, AWS_PROFILE, ...: the standard AWS
                  configuration

worker settings (they override the program's own; durations in Go syntax: 30s, 5m, 1h30m):
`, name) + settingsUsage()
}

// Run runs the program until ctx ends (the worker), or until the migrations are applied
// (`migrate`). A worker whose ctx ends while it is still starting (ECS stops a task that has
// not come up yet) has processed nothing: Run logs what the stop interrupted and returns nil.
// An interrupted `migrate` returns its error, since the migrations may not all be applied.
//
// A database that cannot be reached at start (a failover, a restart, a network fault) is waited
// for, up to DATABASE_WAIT: Run logs the wait once, tries again with a growing delay (2 s at
// most), and serves /livez (up) and /readyz (down) meanwhile. A database that refuses the
// connection (a wrong password, an unknown database) is reported at once.
func Run(ctx context.Context, spec Spec, o Options) (err error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := cmp.Or(o.Logger, slog.Default())
	var migrateOnly bool
	switch {
	case len(o.Args) == 0:
	case len(o.Args) == 1 && o.Args[0] == "migrate":
		migrateOnly = true
	case len(o.Args) == 1 && o.Args[0] == "healthcheck":
		return healthcheck(ctx, getenv)
	case len(o.Args) >= 1 && o.Args[0] == "doctor":
		return runDoctor(ctx, spec, o, getenv, o.Args[1:])
	case len(o.Args) == 1 && (o.Args[0] == "-h" || o.Args[0] == "--help" || o.Args[0] == "help"):
		return errHelp
	default:
		return errUsage
	}

	started := false
	defer func() {
		if !migrateOnly && !started && err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info(spec.Name+": stopped while starting", "cause", context.Cause(ctx), "interrupted", err.Error())
			err = nil
		}
	}()

	// The settings first: a bad one is reported before anything is started or connected.
	wc, err := spec.workerConfig(o.Worker, getenv)
	if err != nil {
		return err
	}
	retention, err := inboxRetention(getenv)
	if err != nil {
		return err
	}
	// The health checks are served from the start, so that a worker waiting for its database is
	// alive (and not ready) to ECS.
	var health *healthSwitch // none for `migrate`
	if !migrateOnly {
		health = &healthSwitch{}
		stopServing, err := serveHealthChecks(getenv, &wc, health, log)
		if err != nil {
			return err
		}
		defer stopServing()
	}
	wait, err := newDBWait(getenv, log, health)
	if err != nil {
		return err
	}
	// One connection per handler, plus the purge loop. The server is asked at once, so a wrong
	// setting is reported before anything else starts; one that cannot be reached is waited for.
	var pool *pgxpool.Pool
	if err := wait.do(ctx, "connect", func(ctx context.Context) (err error) {
		pool, err = Connect(ctx, getenv, int32(wc.Concurrency+2))
		return err
	}); err != nil {
		return err
	}
	defer pool.Close()

	if migrateOnly {
		return wait.do(ctx, "migrate", func(ctx context.Context) error { return migrateAll(ctx, spec, pool, log) })
	}

	ib, err := inbox.New(pool, &inbox.Config{Logger: log, Retention: retention})
	if err != nil {
		return err
	}
	deps := &Deps{Pool: pool, Inbox: ib, Logger: log, Getenv: getenv}
	defer deps.stop()
	h, err := spec.Handler(ctx, deps)
	if err != nil {
		return err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load the AWS configuration: %w", err)
	}
	if err := checkCredentials(ctx, awsCfg, getenv); err != nil {
		return err
	}
	wc.Handler = h
	wc.Logger = log
	if wc.Payloads == nil {
		if wc.Payloads, err = payloadReader(awsCfg, getenv); err != nil {
			return err
		}
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &wc)
	if err != nil {
		return err
	}
	health.set(w)
	// The start-up checks ask the database again: a failover may have begun since the connection.
	if err := wait.do(ctx, "start", w.Start); err != nil {
		return err
	}
	started = true
	log.Info(spec.Name+": running", "queue", w.Queue().Name)
	if o.Started != nil {
		o.Started(w)
	}

	// The purge loop runs beside the worker; it takes an advisory lock, so one replica purges.
	purgeCtx, stopPurge := context.WithCancel(context.WithoutCancel(ctx))
	purged := make(chan struct{})
	go func() {
		defer close(purged)
		_ = ib.PurgeLoop(purgeCtx)
	}()
	defer func() { stopPurge(); <-purged }()

	<-ctx.Done()
	log.Info(spec.Name+": stopping", "cause", context.Cause(ctx))
	return stopWorker(w, wc.ShutdownTimeout, log)
}

// stopWorker stops w gracefully, letting its handlers run for shutdownTimeout (its
// Config.ShutdownTimeout), and then hard if that takes too long.
func stopWorker(w *worker.Worker, shutdownTimeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout+HardStopTimeout/2)
	defer cancel()
	err := w.Stop(ctx)
	if err == nil {
		log.Info("stopped")
		return nil
	}
	log.Warn("graceful stop did not finish; cancelling the handlers", "error", err)
	ctx2, cancel2 := context.WithTimeout(context.Background(), HardStopTimeout/2)
	defer cancel2()
	return w.StopAndCancel(ctx2)
}

func migrateAll(ctx context.Context, spec Spec, pool *pgxpool.Pool, log *slog.Logger) error {
	v, err := inbox.Migrate(ctx, pool, "")
	if err != nil {
		return err
	}
	logMigrated(log, "inbox", v, "schema", inbox.DefaultSchema)
	if spec.Migrate == nil {
		return nil
	}
	v, err = spec.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	logMigrated(log, spec.Name, v)
	return nil
}

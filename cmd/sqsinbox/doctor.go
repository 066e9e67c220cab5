package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/doctor"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker"
)

// errFindings is doctor's exit 1: the report is printed already, so the error is one line.
var errFindings = errors.New("findings")

func runDoctor(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "doctor", "doctor [flags]",
		"  sqsinbox doctor --queue warehouse                          # the queue, its DLQ and subscriptions, and $DATABASE_URL\n"+
			"  sqsinbox doctor --queue warehouse --handler-timeout 2m --json  # for a pipeline: exit 1 on an error\n"+
			"  sqsinbox doctor --no-db --strict --queue https://sqs.eu-west-1.amazonaws.com/123456789012/warehouse\n\n"+
			"Checks the settings a worker's exactly-once processing rests on: the queue's redrive policy, its DLQ,\n"+
			"the visibility timeout against the handler's, the retention against the inbox's, the message size,\n"+
			"encryption, the SNS subscriptions that feed the queue, and the database: migrations, layout, grants,\n"+
			"synchronous_commit, a transaction-mode pooler, the clock, the purge and the outbox. It changes nothing.\n"+
			"Give the worker's own settings (the flags below) so that it checks what the worker will use; a\n"+
			"workerapp program's `doctor` subcommand takes them from the program itself.\n"+
			"Exit 0 without errors (warnings are printed; --strict fails on them too), 1 with any.")
	db.register(fs)
	queue := fs.String("queue", "", "the queue's name or URL (none: the queue is not checked)")
	noDB := fs.Bool("no-db", false, "check the queue only")
	noSNS := fs.Bool("no-sns", false, "do not list the SNS subscriptions that feed the queue")
	noKMS := fs.Bool("no-kms", false, "do not describe the queue's KMS key")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	retention := fs.String("inbox-retention", "", "the inbox's retention, as 28d or 672h (default: the inbox's, 28d)")
	handlerTimeout := fs.Duration("handler-timeout", worker.DefaultHandlerTimeout, "the worker's handler timeout (negative: none)")
	visibility := fs.Duration("visibility-timeout", 0, "the worker's Config.VisibilityTimeout (0: the queue's own)")
	batch := fs.Int("handler-batch", worker.DefaultHandlerBatch, "the worker's handler batch (messages per transaction)")
	concurrency := fs.Int("concurrency", worker.DefaultConcurrency, "the worker's concurrency")
	poolSize := fs.Int("pool-size", 0, "the worker's database pool size (0: pool_max_conns of the database URL, else concurrency + 2)")
	snsMode := fs.String("sns-mode", "auto", "the worker's Config.SNS: auto, raw or envelope")
	routes := fs.String("routes", "", "the router's message types, comma-separated, for the SNS filter policies")
	typeAttr := fs.String("type-attribute", "type", "the message attribute the router reads the type from")
	withOutbox := fs.Bool("outbox", false, "require the outbox (without it, the outbox is checked when it is migrated)")
	threshold := fs.Int("offload-threshold", 0, "the size in bytes over which producers offload a body to S3 (0: 262144)")
	acceptAsync := fs.Bool("accept-async-commit", false, "the inbox accepts synchronous_commit = off (Config.AcceptAsyncCommit)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if *noDB && *queue == "" {
		return fmt.Errorf("%w: --no-db needs --queue", errUsage)
	}
	cfg := &doctor.Config{Queue: *queue, Outbox: *withOutbox, OffloadThreshold: *threshold, TypeAttribute: *typeAttr, PoolSize: *poolSize,
		Worker: worker.Config{HandlerTimeout: *handlerTimeout, VisibilityTimeout: *visibility, HandlerBatch: *batch, Concurrency: *concurrency},
		Inbox:  inbox.Config{Schema: db.schema, AcceptAsyncCommit: *acceptAsync}}
	if *retention != "" {
		if cfg.Inbox.Retention, err = parseAge(*retention); err != nil {
			return err
		}
	}
	if cfg.Worker.SNS, err = parseSNSMode(*snsMode); err != nil {
		return err
	}
	if *routes != "" {
		cfg.Routes = strings.Split(*routes, ",")
	}
	switch {
	case *batch < 1 || *concurrency < 1:
		return fmt.Errorf("%w: --handler-batch and --concurrency must be at least 1", errUsage)
	case *poolSize < 0 || *threshold < 0:
		return fmt.Errorf("%w: --pool-size and --offload-threshold must not be negative", errUsage)
	}
	var deps doctor.Deps
	if *queue != "" {
		awsCfg, err := awsConfig(ctx, fs.timeout)
		if err != nil {
			return err
		}
		deps.SQS = newSQS(awsCfg, fs.timeout)
		if !*noKMS {
			deps.KMS = kms.NewFromConfig(awsCfg)
		}
		if !*noSNS {
			if deps.SNS, err = snsClient(ctx, fs.timeout); err != nil {
				return err
			}
		}
	}
	if !*noDB {
		if err := sqlident.Validate("--schema", db.schema); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		// Not connected yet: an unreachable database is a finding, not a failure of the command.
		// No statement_timeout start-up parameter (the run as a whole is bounded instead): a
		// PgBouncer that does not track it refuses the connection, and a pooler is what doctor
		// must be able to look through.
		pcfg, err := db.poolConfig(0)
		if err != nil {
			return err
		}
		pcfg.ConnConfig.ConnectTimeout = cmp.Or(pcfg.ConnConfig.ConnectTimeout, fs.timeout)
		if cfg.PoolSize == 0 && !strings.Contains(pcfg.ConnString(), "pool_max_conns") {
			cfg.PoolSize = *concurrency + 2 // what a workerapp program opens
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("database: %w", err)
		}
		defer pool.Close()
		deps.Pool = pool
	}
	rctx, cancel := withTimeout(ctx, 4*fs.timeout)
	defer cancel()
	rep, err := doctor.Run(rctx, deps, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return err
	}
	if rep.Failed(*strict) {
		return fmt.Errorf("%w: %d errors, %d warnings", errFindings, rep.Errors(), rep.Warnings())
	}
	return nil
}

// parseSNSMode reads --sns-mode.
func parseSNSMode(s string) (worker.SNSMode, error) {
	switch s {
	case "auto":
		return worker.SNSAuto, nil
	case "raw":
		return worker.SNSRaw, nil
	case "envelope":
		return worker.SNSEnvelope, nil
	}
	return 0, fmt.Errorf("%w: --sns-mode %q: want auto, raw or envelope", errUsage, s)
}

package workerapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/doctor"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// ErrDoctorFindings is returned by `doctor` when its report has an error (or, with --strict, a
// warning); the report itself has been printed.
var ErrDoctorFindings = errors.New("doctor found problems")

// runDoctor is the `doctor` subcommand: the checks of package doctor against this program's own
// worker configuration (Spec.workerConfig), its pool as Connect opens it, its inbox and its
// handler's routes. It changes nothing.
func runDoctor(ctx context.Context, spec Spec, o Options, getenv func(string) string, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	strict := fs.Bool("strict", false, "fail on warnings too")
	noSNS := fs.Bool("no-sns", false, "do not list the SNS subscriptions that feed the queue")
	noKMS := fs.Bool("no-kms", false, "do not describe the queue's KMS key")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return errUsage
	}
	out := o.Stdout
	if out == nil {
		out = os.Stdout
	}
	wc, err := spec.workerConfig(o.Worker, getenv)
	if err != nil {
		return err
	}
	retention, err := inboxRetention(getenv)
	if err != nil {
		return err
	}
	cfg := &doctor.Config{Queue: wc.QueueURL, Worker: wc}
	if cfg.Queue == "" {
		cfg.Queue = wc.QueueName
	}
	var deps doctor.Deps
	var dbErr, handlerErr error
	pool, err := Connect(ctx, getenv, int32(wc.Concurrency+2))
	if err != nil {
		dbErr = err
	} else {
		defer pool.Close()
		deps.Pool = pool
		ib, err := inbox.New(pool, &inbox.Config{Retention: retention})
		if err != nil {
			return err
		}
		cfg.Inbox = inbox.Config{Schema: ib.Schema(), Retention: ib.Retention()}
		d := &Deps{Pool: pool, Inbox: ib, Logger: o.Logger, Getenv: getenv}
		defer d.stop()
		h, err := spec.Handler(ctx, d)
		if r, ok := h.(interface{ Types() []string }); ok && err == nil {
			cfg.Routes = r.Types()
		}
		switch h.(type) {
		case *inboxhandler.Handler, *inboxhandler.Router:
			cfg.PublishesRoutes = true
		}
		if _, batch := h.(worker.BatchHandler); !batch && err == nil && cfg.Worker.HandlerBatch == 0 {
			cfg.Worker.HandlerBatch = 1 // the worker's default for a plain handler
		}
		handlerErr = err
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load the AWS configuration: %w", err)
	}
	if err := checkCredentials(ctx, awsCfg, getenv); err != nil {
		return err
	}
	deps.SQS = sqs.NewFromConfig(awsCfg)
	if !*noSNS {
		deps.SNS = sns.NewFromConfig(awsCfg)
	}
	if !*noKMS {
		deps.KMS = kms.NewFromConfig(awsCfg)
	}
	rep, err := doctor.Run(ctx, deps, cfg)
	if err != nil {
		return err
	}
	if dbErr != nil {
		rep.Add(doctor.Finding{Severity: doctor.Error, Check: "database.reachable", Setting: "DATABASE_URL (or the PG* variables)",
			Seen: strings.Join(strings.Fields(dbErr.Error()), " "), Want: "a server that accepts the worker's connection",
			Fix: "check DATABASE_URL (host, port, database, user, password) and the network path (security groups)"})
	}
	if handlerErr != nil {
		rep.Add(doctor.Finding{Severity: doctor.Error, Check: "worker.handler", Setting: "the program's handler",
			Seen: strings.Join(strings.Fields(handlerErr.Error()), " "), Want: "a handler the worker can start with",
			Fix: "the worker would not start: fix what the error names (its environment, its database)"})
	}
	if *asJSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if rep.Failed(*strict) {
		return fmt.Errorf("%w: %d errors, %d warnings", ErrDoctorFindings, rep.Errors(), rep.Warnings())
	}
	return nil
}

package doctor_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/doctor"
	"github.com/sqsinbox/sqsinbox/worker"
)

// A deployment gate in a program of your own: the worker's settings, its pool and the AWS
// clients go in; a report comes out. It needs the servers, so it has no Output.
func Example() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	rep, err := doctor.Run(ctx, doctor.Deps{SQS: sqs.NewFromConfig(awsCfg), SNS: sns.NewFromConfig(awsCfg), Pool: pool},
		&doctor.Config{Queue: "warehouse", Worker: worker.Config{HandlerTimeout: 2 * time.Minute, Concurrency: 20}})
	if err != nil {
		log.Fatal(err)
	}
	_ = rep.WriteText(os.Stdout)
	if rep.Failed(false) {
		os.Exit(1)
	}
}

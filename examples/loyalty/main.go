// Command loyalty gives a customer 50 points per OrderPaid, exactly once in effect per event,
// however often SQS delivers it.
//
//	loyalty migrate   # the inbox's tables and loyalty.loyalty_accounts, then exit
//	loyalty           # run until SIGTERM or SIGINT
package main

import (
	"context"

	"github.com/sqsinbox/sqsinbox/examples/loyalty/loyalty"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

func main() { workerapp.Main(spec) }

var spec = workerapp.Spec{
	Name:    loyalty.HandlerName,
	Migrate: loyalty.Migrate,
	Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) { return loyalty.New(d.Inbox) },
}

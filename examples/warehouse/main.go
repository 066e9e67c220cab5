// Command warehouse is the worker of the OrderPaid story: each OrderPaid sets its order to
// PICKING and creates one pick task, exactly once in effect however often SQS delivers it.
//
//	warehouse migrate   # the inbox's tables and the warehouse's, then exit
//	warehouse           # run until SIGTERM or SIGINT
package main

import (
	"context"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

func main() { workerapp.Main(spec) }

var spec = workerapp.Spec{
	Name:    warehouse.HandlerName,
	Migrate: warehouse.Migrate,
	Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) { return warehouse.New(d.Inbox) },
}

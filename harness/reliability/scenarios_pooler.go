package reliability

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// EnvWarehouse, set in a process's environment, makes [WarehouseMain] run the warehouse
// example's worker in it, configured by its environment as the example's main is.
const EnvWarehouse = "SQSINBOX_RELIABILITY_WAREHOUSE"

// warehouseSpec is examples/warehouse's program: its main is workerapp.Main of this Spec.
var warehouseSpec = workerapp.Spec{
	Name:    warehouse.HandlerName,
	Migrate: warehouse.Migrate,
	Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) { return warehouse.New(d.Inbox) },
}

// WarehouseMain runs the warehouse example's worker, as its main does (workerapp, JSON logs to
// stderr, stop on SIGTERM), when EnvWarehouse is set, and returns the process's exit code: 1
// when the worker returned an error, which is what the example's main exits with. It returns
// -1 when EnvWarehouse is not set. A test binary's TestMain calls it first.
func WarehouseMain() int {
	if os.Getenv(EnvWarehouse) == "" {
		return -1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := workerapp.NewLogger(os.Stderr, os.Getenv("LOG_LEVEL"))
	if err := workerapp.Run(ctx, warehouseSpec, workerapp.Options{Logger: log}); err != nil {
		log.Error(warehouseSpec.Name + ": " + err.Error())
		return 1
	}
	return 0
}

// PoolerOptions sizes [PoolerChaos].
type PoolerOptions struct {
	// Workers is the number of worker processes. 0 means 3.
	Workers int
	// Events is the number of OrderPaid events, a fifth of them sent two to five times. 0 means
	// 300.
	Events int
	// Poison is the number of messages no handler accepts (an OrderPaid without an order). 0
	// means 5.
	Poison int
	// Kills is the most SIGKILLs. 0 means 3 per worker.
	Kills int
	// Timeout bounds the drain. 0 means 2 minutes.
	Timeout time.Duration
}

// PoolerReport is what [PoolerChaos] saw.
type PoolerReport struct {
	Events, Messages, Poison int
	// Kills is the number of SIGKILLs; SelfExits the worker processes that exited without being
	// killed or told to stop (each restarted, as ECS would), with the end of their output.
	Kills, SelfExits int
	SelfExitTails    []string
	// Lost is the number of orders without a pick task, Twice those with more than one.
	Lost, Twice int
	// DLQ is the number of messages in the dead-letter queue at the end.
	DLQ int
	// ServerConns is the most server connections the pooler held at a sample (SHOW POOLS).
	ServerConns int
	// StopErrors are the worker processes that did not stop cleanly on SIGTERM at the end.
	StopErrors []string
	// Took is the time from the first send to the drain.
	Took time.Duration
}

func (r *PoolerReport) String() string {
	return fmt.Sprintf("%d events in %d messages + %d poison, %d SIGKILLs, %d self-exits, %d lost, %d applied twice, "+
		"%d in the DLQ, at most %d server connections, drained in %v",
		r.Events, r.Messages, r.Poison, r.Kills, r.SelfExits, r.Lost, r.Twice, r.DLQ, r.ServerConns, r.Took.Round(100*time.Millisecond))
}

// PoolerChaos runs the warehouse example as Workers processes (the test binary re-executed with
// EnvWarehouse; Env.Command) at the README's defaults, with DATABASE_URL pointing at a
// PgBouncer in transaction mode in front of Env.DB and no query mode in it, migrated through the
// pooler too. It sends the events (with duplicates) and the poison messages, SIGKILLs a random
// worker every 0.3 to 1.5 s while messages remain (restarting it), and restarts any worker that
// exits by itself, counting it. It returns once every order has a pick task, the queue is empty
// and the poison is in the DLQ, or when Timeout passes (the report then says what is missing).
func PoolerChaos(ctx context.Context, e *Env, o PoolerOptions) (*PoolerReport, error) {
	o.Workers = cmp.Or(o.Workers, 3)
	o.Events = cmp.Or(o.Events, 300)
	o.Poison = cmp.Or(o.Poison, 5)
	o.Kills = cmp.Or(o.Kills, 3*o.Workers)
	o.Timeout = cmp.Or(o.Timeout, 2*time.Minute)
	b, err := pgbouncer.Start(ctx, e.DB, nil)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	q, err := e.SQS.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "pooler", VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 3})
	if err != nil {
		return nil, err
	}
	env := map[string]string{"DATABASE_URL": b.URL, "QUEUE_URL": q.URL, "LOG_LEVEL": "warn"}
	migrate := workerapp.Options{Args: []string{"migrate"}, Getenv: func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return os.Getenv(k)
	}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := workerapp.Run(ctx, warehouseSpec, migrate); err != nil {
		return nil, fmt.Errorf("reliability: migrate the warehouse through PgBouncer: %w", err)
	}
	dir, err := os.MkdirTemp(e.Dir, "rel-pooler-")
	if err != nil {
		return nil, err
	}
	c := &poolerRun{e: e, b: b, q: q, o: o, procs: &Procs{Dir: dir, Env: []string{EnvWarehouse + "=1"}}, health: map[*Proc]string{}}
	for k, v := range env {
		c.procs.Env = append(c.procs.Env, k+"="+v)
	}
	defer c.procs.KillAll()
	if c.direct, err = pgxpool.New(ctx, e.DB.URL); err != nil {
		return nil, err
	}
	defer c.direct.Close()
	c.workers = make([]*Proc, o.Workers)
	for i := range c.workers {
		if err := c.start(i); err != nil {
			return nil, err
		}
	}
	prefix := "pool" + randHex(3)
	events := exampletest.Events(prefix, o.Events, 50)
	msgs := exampletest.Messages(events)
	for i := range o.Poison {
		msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":"evt_%s_poison_%d"}`, prefix, i)})
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	c.rep = &PoolerReport{Events: len(events), Messages: len(msgs) - o.Poison, Poison: o.Poison}
	c.ids = make([]string, len(events))
	for i, ev := range events {
		c.ids[i] = ev.OrderID
	}
	began := time.Now()
	sent := make(chan error, 1)
	go func() { sent <- sqstest.Send(ctx, e.SQS.Client(), q.URL, msgs) }()
	if err := c.chaos(ctx, sent); err != nil {
		return c.rep, err
	}
	c.rep.Took = time.Since(began)
	return c.rep, c.finish(ctx)
}

// poolerRun is one PoolerChaos run: the pooler, the queue, the worker processes (with each
// one's health address) and the report.
type poolerRun struct {
	e       *Env
	b       *pgbouncer.Bouncer
	q       *sqstest.Queue
	o       PoolerOptions
	procs   *Procs
	health  map[*Proc]string
	workers []*Proc
	gen     int
	direct  *pgxpool.Pool // the database, directly
	ids     []string      // the events' orders
	rep     *PoolerReport
}

// start starts (or restarts) worker i, serving its health endpoints on an address of its own.
func (c *poolerRun) start(i int) error {
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	c.gen++
	p, err := c.procs.Start("warehouse-"+strconv.Itoa(i)+"."+strconv.Itoa(c.gen), c.e.Command(), "HEALTH_ADDR="+addr)
	if err != nil {
		return err
	}
	c.workers[i], c.health[p] = p, addr
	return nil
}

// chaos kills a random worker every 0.3 to 1.5 s while messages remain (up to Kills), restarts
// the killed ones and any that exited by itself (counted), and samples the pooler's server
// connections, until sent has reported, every order has its pick task, the queue is empty and
// the poison is in the DLQ, or Timeout passes.
func (c *poolerRun) chaos(ctx context.Context, sent chan error) error {
	client := c.e.SQS.Client()
	deadline := time.Now().Add(c.o.Timeout)
	for time.Now().Before(deadline) {
		if err := sleep(ctx, time.Duration(300+rand.IntN(1200))*time.Millisecond); err != nil {
			return err
		}
		for i, p := range c.workers {
			if exited, _ := p.Exited(); exited {
				c.rep.SelfExits++
				c.rep.SelfExitTails = append(c.rep.SelfExitTails, p.ID+": "+p.Tail(600))
				if err := c.start(i); err != nil {
					return err
				}
			}
		}
		if n, err := c.b.ServerConns(ctx); err == nil {
			c.rep.ServerConns = max(c.rep.ServerConns, n)
		}
		left, _ := sqstest.Count(ctx, client, c.q.URL)
		if left > 0 && c.rep.Kills < c.o.Kills {
			i := rand.IntN(len(c.workers))
			c.workers[i].Kill()
			c.rep.Kills++
			if err := c.start(i); err != nil {
				return err
			}
		}
		select {
		case err := <-sent:
			if err != nil {
				return fmt.Errorf("reliability: send: %w", err)
			}
			sent = nil
		default:
		}
		if sent == nil && left == 0 {
			got, err := warehouse.PickTasks(ctx, c.direct, c.ids)
			dlq, _ := sqstest.Count(ctx, client, c.q.DLQURL)
			if err == nil && len(got) == len(c.ids) && missing(got) == 0 && dlq >= c.o.Poison {
				return nil
			}
		}
	}
	return nil // the report says what is missing
}

// finish stops the workers with SIGTERM and tallies the pick tasks and the DLQ.
func (c *poolerRun) finish(ctx context.Context) error {
	for _, p := range c.workers {
		// A worker restarted a moment ago may not handle SIGTERM yet: wait until it serves /livez.
		waitLive(ctx, p, c.health[p], time.Minute)
		if err := p.Term(time.Minute); err != nil {
			c.rep.StopErrors = append(c.rep.StopErrors, p.ID+": "+err.Error()+": "+p.Tail(600))
		}
	}
	got, err := warehouse.PickTasks(ctx, c.direct, c.ids)
	if err != nil {
		return err
	}
	for _, id := range c.ids {
		switch got[id] {
		case 0:
			c.rep.Lost++
		case 1:
		default:
			c.rep.Twice++
		}
	}
	c.rep.DLQ, err = sqstest.Count(ctx, c.e.SQS.Client(), c.q.DLQURL)
	return err
}

// waitLive waits until the process serves http://addr/livez, exits, or timeout passes.
func waitLive(ctx context.Context, p *Proc, addr string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if exited, _ := p.Exited(); exited {
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/livez", nil)
		if err != nil {
			return
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if sleep(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
}

// missing counts the orders of got without a pick task.
func missing(got map[string]int) int {
	n := 0
	for _, c := range got {
		if c == 0 {
			n++
		}
	}
	return n
}

// Command poolerbench measures many worker processes sharing one database through PgBouncer
// against a few on direct connections: the warehouse example's program (workerapp at its
// defaults), -pooled processes (16) whose DATABASE_URL points at PgBouncer in transaction mode
// with default_pool_size -pool-size (20), and -direct processes (4) on PostgreSQL itself, each
// draining a backlog of -n OrderPaid messages (a fifth of the events sent two to five times)
// from a queue of its own. It prints, per run, the drain's time and rate (messages a second,
// from the workers' start to the last pick task), the most server connections seen (PgBouncer's
// SHOW POOLS for the pooled run, pg_stat_activity's client backends for the direct one, sampled
// every 100 ms), and the ratio of the pooled rate to the direct one, over -rounds interleaved
// rounds (medians). The time includes the processes' start-up (the first pick task's time is
// printed per round): a larger backlog weighs it less. Worker processes are this program
// re-executed.
//
// It starts its own PostgreSQL (harness/pgtest: a throwaway cluster) and SQS server
// (harness/sqstest: GoAws, or fauxqs with -sqs fauxqs). Run it from the repository:
//
//	go run ./harness/cmd/poolerbench -n 20000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

func main() {
	if code := reliability.WarehouseMain(); code >= 0 {
		os.Exit(code)
	}
	n := flag.Int("n", 20000, "messages in each backlog")
	pooled := flag.Int("pooled", 16, "worker processes through PgBouncer")
	direct := flag.Int("direct", 4, "worker processes on direct connections")
	poolSize := flag.Int("pool-size", 20, "PgBouncer's default_pool_size")
	rounds := flag.Int("rounds", 3, "interleaved rounds of both runs")
	server := flag.String("sqs", "goaws", "SQS server: goaws or fauxqs")
	flag.Parse()
	if err := run(*n, *pooled, *direct, *poolSize, *rounds, *server); err != nil {
		log.Fatal(err)
	}
}

// result is one drain.
type result struct {
	rate  float64 // messages a second
	took  time.Duration
	first time.Duration // from the start to the first pick task seen: the processes' start-up
	conns int           // most server connections seen
}

func run(n, pooled, direct, poolSize, rounds int, server string) error {
	ctx := context.Background()
	if err := os.Setenv("SQSINBOX_TEST_SQS", server); err != nil {
		return err
	}
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	db, err := pgtest.StartOwned(ctx, "poolerbench")
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := pgbouncer.Start(ctx, db, &pgbouncer.Config{DefaultPoolSize: poolSize})
	if err != nil {
		return err
	}
	defer b.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	migrate := workerapp.Options{Args: []string{"migrate"}, Logger: quiet,
		Getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return db.URL
			}
			return os.Getenv(k)
		}}
	spec := workerapp.Spec{Name: warehouse.HandlerName, Migrate: warehouse.Migrate}
	if err := workerapp.Run(ctx, spec, migrate); err != nil {
		return err
	}
	admin, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		return err
	}
	defer admin.Close()
	var pooledRuns, directRuns []result
	for r := range rounds {
		for _, p := range []bool{r%2 == 0, r%2 != 0} {
			procs, url := direct, db.URL+"&application_name="+directApp
			if p {
				procs, url = pooled, b.URL
			}
			res, err := drain(ctx, srv, admin, b, url, p, procs, n, fmt.Sprintf("r%d%v", r, p))
			if err != nil {
				return err
			}
			fmt.Printf("round %d, %s: %d processes, %d messages in %v (first pick task at %v): %.0f msgs/s, at most %d server connections\n",
				r+1, label(p), procs, n, res.took.Round(10*time.Millisecond), res.first.Round(10*time.Millisecond), res.rate, res.conns)
			if p {
				pooledRuns = append(pooledRuns, res)
			} else {
				directRuns = append(directRuns, res)
			}
		}
	}
	pr, dr := median(pooledRuns, func(r result) float64 { return r.rate }), median(directRuns, func(r result) float64 { return r.rate })
	fmt.Printf("\nwarehouse workers at their defaults draining %d messages (%s; medians of %d interleaved rounds)\n", n, server, rounds)
	fmt.Printf("%-34s %9s %9s %12s %18s\n", "run", "processes", "msgs/s", "server conns", "rate vs direct")
	fmt.Printf("%-34s %9d %9.0f %12.0f %18.2f\n", fmt.Sprintf("PgBouncer (default_pool_size %d)", poolSize), pooled, pr,
		median(pooledRuns, func(r result) float64 { return float64(r.conns) }), pr/dr)
	fmt.Printf("%-34s %9d %9.0f %12.0f %18.2f\n", "direct", direct, dr,
		median(directRuns, func(r result) float64 { return float64(r.conns) }), 1.0)
	return nil
}

func label(pooled bool) string {
	if pooled {
		return "PgBouncer"
	}
	return "direct"
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// drain sends a backlog of n messages to a new queue, starts procs warehouse workers on url, and
// waits until every order has its pick task and the queue is empty, sampling the server
// connections; then it stops the workers.
func drain(ctx context.Context, srv *sqstest.Server, admin *pgxpool.Pool, b *pgbouncer.Bouncer, url string, pooled bool, procs, n int, tag string) (result, error) {
	q, err := srv.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "poolerbench", VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 10})
	if err != nil {
		return result{}, err
	}
	var events []exampletest.Event
	msgs := 0
	for _, e := range exampletest.Events(tag+randTag(), n, 50) {
		if msgs >= n {
			break
		}
		e.Times = min(e.Times, n-msgs)
		msgs += e.Times
		events = append(events, e)
	}
	if err := sqstest.Send(ctx, srv.Client(), q.URL, exampletest.Messages(events)); err != nil {
		return result{}, err
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.OrderID
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range cmds {
			_ = c.Wait()
		}
	}()
	start := time.Now()
	for range procs {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), reliability.EnvWarehouse+"=1", "DATABASE_URL="+url, "QUEUE_URL="+q.URL, "LOG_LEVEL=warn")
		c.Stderr = os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return result{}, err
		}
		cmds = append(cmds, c)
	}
	res := result{}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		time.Sleep(100 * time.Millisecond) // a sampling period, not a wait for an event
		if c, err := serverConns(ctx, admin, b, pooled); err == nil {
			res.conns = max(res.conns, c)
		}
		got, err := warehouse.PickTasks(ctx, admin, ids)
		if err != nil {
			return res, err
		}
		done := 0
		for _, id := range ids {
			if got[id] > 0 {
				done++
			}
		}
		if done > 0 && res.first == 0 {
			res.first = time.Since(start)
		}
		if done == len(ids) {
			if left, err := sqstest.Count(ctx, srv.Client(), q.URL); err == nil && left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%s: %d of %d orders done after 10 minutes", tag, done, len(ids))
		}
	}
	res.took = time.Since(start)
	res.rate = float64(msgs) / res.took.Seconds()
	return res, nil
}

// serverConns is the number of server connections the workers hold: the pooler's, or the
// backends of the direct workers (their URL names them with application_name).
func serverConns(ctx context.Context, admin *pgxpool.Pool, b *pgbouncer.Bouncer, pooled bool) (int, error) {
	if pooled {
		return b.ServerConns(ctx)
	}
	var n int
	err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", directApp).Scan(&n)
	return n, err
}

// directApp is the application_name of the direct workers' connections.
const directApp = "poolerbench-direct"

func randTag() string {
	return strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()%1e6), "-", "")
}

// Command manytasks measures many worker tasks sharing one database: the warehouse example's
// binary at its defaults, as 16 processes through PgBouncer (transaction mode, default_pool_size
// 20) and as 4 processes on direct connections, each draining the same backlog, in alternating
// rounds. It prints, per round and as medians, the drain rate (pick tasks per second, from the
// first commit to the last) and the most server connections PostgreSQL held for the workers
// (pg_stat_activity) and PgBouncer held (SHOW POOLS), and the ratio of the two rates.
//
//	go run ./harness/cmd/manytasks -messages 3000 -rounds 3
//
// It needs PostgreSQL (a throwaway cluster from the local binaries, or TEST_DATABASE_URL),
// Debian's pgbouncer, and an SQS server (GoAws, or fauxqs with SQSINBOX_TEST_SQS=fauxqs).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

func main() {
	messages := flag.Int("messages", 3000, "backlog per round (distinct OrderPaid events)")
	rounds := flag.Int("rounds", 3, "rounds of each setup, alternating")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *messages, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "manytasks:", err)
		os.Exit(1)
	}
}

// setup is one way of running the workers.
type setup struct {
	name    string
	procs   int
	url     string // DATABASE_URL
	bouncer *pgbouncer.Bouncer
}

// result is one round of a setup.
type result struct {
	rate              float64 // pick tasks per second, first commit to last
	pgConns, bouncerS int     // most server connections: PostgreSQL's client backends, PgBouncer's servers
}

func run(ctx context.Context, messages, rounds int) error {
	srv, err := sqstest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	db, err := pgtest.Start(ctx, "manytasks")
	if err != nil {
		return err
	}
	defer db.Close()
	bouncer, err := pgbouncer.Start(ctx, db, &pgbouncer.Config{DefaultPoolSize: 20})
	if err != nil {
		return err
	}
	defer bouncer.Close()
	dir, err := os.MkdirTemp("", "manytasks-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin, err := reliability.WarehouseBinary(ctx, dir)
	if err != nil {
		return err
	}
	// Through a transaction pooler the driver's default query mode fails; cache_describe is the
	// mode the worker chooses there once it detects the pooler.
	viaBouncer, err := withParam(bouncer.URL, "default_query_exec_mode", "cache_describe")
	if err != nil {
		return err
	}
	procs := &reliability.Procs{Dir: dir, Env: []string{"LOG_LEVEL=warn"}}
	defer procs.KillAll()
	mig, err := procs.Start("migrate", exec.Command(bin, "migrate"), "DATABASE_URL="+db.URL)
	if err != nil {
		return err
	}
	if done, err := mig.Wait(2 * time.Minute); !done || err != nil {
		return fmt.Errorf("migrate: %w: %s", cmp.Or(err, errors.New("not done within 2 minutes")), mig.Tail(2000))
	}
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return err
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "manytasks" // not counted among the workers'
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	setups := []setup{
		{name: "4 processes, direct", procs: 4, url: db.URL},
		{name: "16 processes, PgBouncer (transaction, default_pool_size 20)", procs: 16, url: viaBouncer, bouncer: bouncer},
	}
	results := make([][]result, len(setups))
	n := 0
	for round := range rounds {
		for i, s := range setups {
			r, err := drain(ctx, srv, pool, procs, bin, s, messages, &n)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, round+1, err)
			}
			results[i] = append(results[i], r)
			fmt.Printf("round %d  %-60s  %7.0f msgs/s  %3d PostgreSQL connections  %3d PgBouncer server connections\n",
				round+1, s.name, r.rate, r.pgConns, r.bouncerS)
		}
	}
	fmt.Printf("\n%d events per round, %d rounds each, SQS server %s; medians (min-max):\n", messages, rounds, srv.Kind)
	var med []float64
	for i, s := range setups {
		rates := collect(results[i], func(r result) float64 { return r.rate })
		conns := collect(results[i], func(r result) float64 { return float64(r.pgConns) })
		fmt.Printf("  %-60s  %7.0f msgs/s (%.0f-%.0f)  %3.0f PostgreSQL connections (%.0f-%.0f)\n",
			s.name, median(rates), rates[0], rates[len(rates)-1], median(conns), conns[0], conns[len(conns)-1])
		med = append(med, median(rates))
	}
	fmt.Printf("  ratio (16 through PgBouncer / 4 direct): %.2f\n", med[1]/med[0])
	return nil
}

// drain sends a backlog of messages events to a new queue, runs s's processes on it until every
// event has its pick task, and measures the round.
func drain(ctx context.Context, srv *sqstest.Server, pool *pgxpool.Pool, procs *reliability.Procs, bin string, s setup, messages int, n *int) (result, error) {
	if _, err := pool.Exec(ctx, `TRUNCATE warehouse.pick_tasks, warehouse.orders`); err != nil {
		return result{}, err
	}
	q, err := srv.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "manytasks", MaxReceiveCount: 5})
	if err != nil {
		return result{}, err
	}
	msgs := make([]sqstest.Message, messages)
	for i := range msgs {
		*n++
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":"evt_%d","order_id":"ord_%d","customer_id":"c","amount":1}`, *n, *n)}
	}
	if err := sqstest.Send(ctx, srv.Client(), q.URL, msgs); err != nil {
		return result{}, err
	}
	// The last round's server connections (PgBouncer keeps them idle) are not this round's.
	if err := waitNoWorkers(ctx, pool); err != nil {
		return result{}, err
	}
	var running []*reliability.Proc
	defer func() {
		for _, p := range running {
			_ = p.Term(time.Minute)
		}
		if s.bouncer != nil {
			_ = closeServerConns(ctx, s.bouncer)
		}
	}()
	for i := range s.procs {
		p, err := procs.Start(fmt.Sprintf("w%d-%d", *n, i), exec.Command(bin), "DATABASE_URL="+s.url, "QUEUE_URL="+q.URL)
		if err != nil {
			return result{}, err
		}
		running = append(running, p)
	}
	var r result
	var mu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			var c int
			// The workers' connections: every client backend but this pool's own.
			if err := pool.QueryRow(sampleCtx, workersSQL).Scan(&c); err == nil {
				mu.Lock()
				r.pgConns = max(r.pgConns, c)
				mu.Unlock()
			}
			if s.bouncer != nil {
				if c, err := s.bouncer.ServerConns(sampleCtx); err == nil {
					mu.Lock()
					r.bouncerS = max(r.bouncerS, c)
					mu.Unlock()
				}
			}
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-sampleCtx.Done():
				t.Stop()
			}
		}
	}()
	var done int
	var secs float64
	ok := sqstest.PollUntil(ctx, 10*time.Minute, func() bool {
		err := pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM max(created_at) - min(created_at)), 0)::float8
FROM warehouse.pick_tasks`).Scan(&done, &secs)
		return err == nil && done >= messages
	})
	stopSampling()
	<-sampled
	if !ok {
		return result{}, fmt.Errorf("%d of %d events applied after 10 minutes", done, messages)
	}
	for _, p := range running {
		if exited, err := p.Exited(); exited {
			return result{}, fmt.Errorf("worker %s exited by itself: %w: %s", p.ID, err, p.Tail(1000))
		}
	}
	r.rate = float64(done) / max(secs, 0.001)
	return r, nil
}

// workersSQL counts the workers' connections: every client backend of the database but the
// bench's own.
const workersSQL = `SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND datname = current_database() AND application_name <> 'manytasks'`

// waitNoWorkers waits until no worker (or pooler) connection is left on the database.
func waitNoWorkers(ctx context.Context, pool *pgxpool.Pool) error {
	var n int
	if !sqstest.PollUntil(ctx, time.Minute, func() bool {
		return pool.QueryRow(ctx, workersSQL).Scan(&n) == nil && n == 0
	}) {
		return fmt.Errorf("%d connections of the last round still open after a minute", n)
	}
	return nil
}

// closeServerConns has PgBouncer close its server connections (KILL, then RESUME, each pool's
// database on the admin console).
func closeServerConns(ctx context.Context, b *pgbouncer.Bouncer) error {
	pools, err := b.Pools(ctx)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.AdminURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	for _, p := range pools {
		// The names are pgtest's (letters, digits, underscores); the console takes no parameters.
		for _, cmd := range []string{"KILL ", "RESUME "} {
			if _, err := conn.PgConn().Exec(ctx, cmd+p.Database).ReadAll(); err != nil {
				return fmt.Errorf("pgbouncer %s%s: %w", cmd, p.Database, err)
			}
		}
	}
	return nil
}

// withParam returns the connection URL u with the query parameter k=v.
func withParam(u, k, v string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	q := p.Query()
	q.Set(k, v)
	p.RawQuery = q.Encode()
	return p.String(), nil
}

func collect(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	slices.Sort(out)
	return out
}

func median(xs []float64) float64 {
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

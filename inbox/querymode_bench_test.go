package inbox_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// BenchmarkClaimQueryModes measures claim-and-run (the claim and a business insert, through
// inbox.Run) with each pgx query mode, on a direct connection and through PgBouncer in
// transaction mode, and prints a table: median transactions per second over
// SQSINBOX_BENCH_ROUNDS (default 10) interleaved rounds of SQSINBOX_BENCH_SECONDS (default 1)
// each, the lowest and highest round, and the ratio of each median to the direct cache_statement
// one (pgx's default) of the same run. A mode that fails through the pooler is reported as such.
// Run it with `make bench-querymodes`. The connections (SQSINBOX_BENCH_CONNS, default 8) are
// fewer than PgBouncer's default_pool_size (20), so the pooler does not queue them.
func BenchmarkClaimQueryModes(b *testing.B) {
	rounds, secs, conns := 10, 1, 8
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_ROUNDS")); err == nil && s > 0 {
		rounds = s
	}
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_CONNS")); err == nil && s > 0 {
		conns = s
	}
	ctx := context.Background()
	bouncer, err := pgbouncer.Start(ctx, db, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bouncer.Close()
	admin := newPool(b, 2)
	schema := "qm_" + randHex(4)
	if _, err := inbox.Migrate(ctx, admin, schema); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE `+schema+`.bench_rows (id bigserial PRIMARY KEY, event_id text NOT NULL, handler text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	fsync := fsyncOff(b, admin)
	var cells []*modeCell
	for _, p := range []struct{ name, url string }{{"direct", db.URL}, {"pgbouncer", bouncer.URL}} {
		for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
			cells = append(cells, &modeCell{path: p.name, url: p.url, mode: mode})
		}
	}
	dur := time.Duration(secs) * time.Second
	for r := range rounds {
		// Interleaved: each round runs every cell, starting one further along.
		for i := range cells {
			c := cells[(i+r)%len(cells)]
			if c.failed != nil {
				continue
			}
			if _, err := admin.Exec(ctx, `TRUNCATE `+schema+`.processed_messages, `+schema+`.bench_rows`); err != nil {
				b.Fatal(err)
			}
			if tps := c.run(b, schema, conns, dur); c.failed == nil {
				c.tps = append(c.tps, tps)
			}
		}
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	ref := med(cells[0].tps)
	fmt.Printf("\ninbox claim-and-run by pgx query mode: %d connections, median of %d interleaved rounds of %v, fsync %s, PgBouncer in pool_mode=%s\n",
		conns, rounds, dur, fsync, bouncer.Config.PoolMode)
	fmt.Printf("%-10s %-16s %10s %19s %22s\n", "path", "query mode", "tx/s", "round range", "vs direct cache_stmt")
	for _, c := range cells {
		if c.failed != nil {
			fmt.Printf("%-10s %-16s %10s   fails: %v\n", c.path, c.mode, "-", c.failed)
			continue
		}
		fmt.Printf("%-10s %-16s %10.0f %19s %22.2f\n", c.path, c.mode, med(c.tps),
			fmt.Sprintf("%.0f-%.0f", slices.Min(c.tps), slices.Max(c.tps)), med(c.tps)/ref)
	}
}

// modeCell is one query mode on one path, and its rounds' rates.
type modeCell struct {
	path, url, mode string
	tps             []float64
	failed          error
}

// run is one timed run of claim-and-run in the cell's query mode, on a pool of conns connections
// made for it. A mode that fails (one the pooler breaks) is marked failed and runs no more.
func (c *modeCell) run(b *testing.B, schema string, conns int, dur time.Duration) float64 {
	cfg, err := pgxpool.ParseConfig(c.url + "&default_query_exec_mode=" + c.mode)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	ib, fn := benchInbox(b, pool, schema, true)
	var mu sync.Mutex
	tps, _ := runLoopOn(b, pool, conns, dur, func(*pgxpool.Pool) {}, func(ctx context.Context, key string) error {
		if _, err := ib.Run(ctx, "bench", key, fn); err != nil {
			mu.Lock()
			c.failed = cmp.Or(c.failed, err)
			mu.Unlock()
		}
		return nil
	})
	if c.failed != nil {
		return 0
	}
	return tps
}

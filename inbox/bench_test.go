package inbox_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// BenchmarkInboxVsPgbench measures claim-and-run through the public API against pgbench running
// the same SQL (BEGIN; claim INSERT; [business INSERT;] COMMIT) at the same concurrency on the
// same server, in the same run, and prints the ratio. Beside them it runs the same script through
// plain pgx (one round trip per statement, as pgbench does): the Go driver's own rate, which
// separates the inbox's cost from the driver's. Run it with `make bench-inbox`.
// SQSINBOX_BENCH_SECONDS sets each run's length (default 5) and SQSINBOX_BENCH_ROUNDS the
// number of alternating rounds (default 3). The ratio is of the means; the range beside it is
// the lowest and highest ratio of a single round, which shows how noisy the machine was.
//
// The batched rows ("batch N") run inbox.RunBatch with N events (SQSINBOX_BENCH_BATCH, default
// 10) and the business insert each, against pgbench and plain pgx running N × (SAVEPOINT, claim,
// insert, RELEASE SAVEPOINT) and one COMMIT per transaction; their rates are in events per
// second (transactions × N), and allocs/op is per event. SQSINBOX_BENCH_WORK picks the rows:
// claim, claim+insert, batch, comma-separated (default all).
func BenchmarkInboxVsPgbench(b *testing.B) {
	pgbench, err := pgbenchPath()
	if err != nil {
		b.Fatal(err)
	}
	secs := 5
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	rounds := 3
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_ROUNDS")); err == nil && s > 0 {
		rounds = s
	}
	batch := 10
	if s, err := strconv.Atoi(os.Getenv("SQSINBOX_BENCH_BATCH")); err == nil && s > 0 {
		batch = min(s, inbox.MaxBatch)
	}
	works := []string{"claim", "claim+insert", "batch"}
	if w := os.Getenv("SQSINBOX_BENCH_WORK"); w != "" {
		works = strings.Split(w, ",")
	}
	dur := time.Duration(secs) * time.Second
	ctx := context.Background()
	admin := newPool(b, 2)
	schema := "bench_" + randHex(4)
	if _, err := inbox.Migrate(ctx, admin, schema); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE `+schema+`.bench_rows (id bigserial PRIMARY KEY, event_id text NOT NULL, handler text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	fsync := fsyncOff(b, admin)
	fmt.Printf("\ninbox claim-and-run vs pgbench (same SQL, same server, fsync %s, mean of %d alternating runs of %v, GOMAXPROCS=%d)\n",
		fsync, rounds, dur, runtime.GOMAXPROCS(0))
	fmt.Printf("%-14s %5s %12s %12s %12s %7s %13s %13s %11s\n", "work", "conns", "pgbench tx/s", "plain pgx", "inbox tx/s",
		"ratio", "round range", "inbox/pgx", "allocs/op")
	for _, work := range works {
		var withInsert bool
		size := 1 // events per transaction
		switch work = strings.TrimSpace(work); work {
		case "claim":
		case "claim+insert":
			withInsert = true
		case "batch":
			withInsert, size = true, batch
		default:
			b.Fatalf("SQSINBOX_BENCH_WORK: unknown work %q (claim, claim+insert, batch)", work)
		}
		if size > 1 {
			work = fmt.Sprintf("batch%d", size) // rates in events per second, allocs/op per event
		}
		for _, conns := range benchConns() {
			reset := func() {
				if _, err := admin.Exec(ctx, `TRUNCATE `+schema+`.processed_messages, `+schema+`.bench_rows; CHECKPOINT`); err != nil {
					b.Fatal(err)
				}
			}
			// Rounds alternate, so drift in the machine's load hits both sides alike.
			var ref, plain, ours, allocs float64
			lo, hi := math.Inf(1), math.Inf(-1)
			for range rounds {
				var r, p, o, a float64
				if size == 1 {
					reset()
					if r, err = runPgbench(pgbench, schema, withInsert, conns, secs); err != nil {
						b.Fatal(err)
					}
					reset()
					p, _ = runPlainPgx(b, schema, withInsert, conns, dur)
					reset()
					o, a = runInbox(b, schema, withInsert, conns, dur)
				} else {
					reset()
					if r, err = runPgbenchBatch(pgbench, schema, size, conns, secs); err != nil {
						b.Fatal(err)
					}
					reset()
					p, _ = runPlainPgxBatch(b, schema, size, conns, dur)
					reset()
					o, a = runInboxBatch(b, schema, size, conns, dur)
					// Events, not transactions.
					r, p, o, a = r*float64(size), p*float64(size), o*float64(size), a/float64(size)
				}
				k := float64(rounds)
				ref, plain, ours, allocs = ref+r/k, plain+p/k, ours+o/k, allocs+a/k
				lo, hi = min(lo, o/r), max(hi, o/r)
			}
			fmt.Printf("%-14s %5d %12.0f %12.0f %12.0f %7.2f %13s %13.2f %11.1f\n", work, conns, ref, plain, ours, ours/ref,
				fmt.Sprintf("%.2f-%.2f", lo, hi), ours/plain, allocs)
			b.ReportMetric(ours/ref, fmt.Sprintf("ratio-%s-c%d", work, conns))
		}
	}
	if slices.Contains(works, "batch") {
		fmt.Printf("batch%d: %d events per transaction, the claim and the insert each; rates in events/s (transactions × %d), allocs/op per event\n",
			batch, batch, batch)
	}
}

// fsyncOff turns fsync off on the harness's own cluster for the benchmark, and says what fsync
// is: the disk's flush latency on these shared machines swings several-fold between runs, which
// drowns the comparison, and the limit being measured is CPU per transaction (BENCHMARKS.md).
// synchronous_commit stays on. With TEST_DATABASE_URL the server is measured as it is.
func fsyncOff(b *testing.B, admin *pgxpool.Pool) string {
	if !db.Owned() {
		return "as configured"
	}
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET fsync = off"); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "ALTER SYSTEM RESET fsync")
		_, _ = admin.Exec(context.Background(), "SELECT pg_reload_conf()")
	})
	return "off (throwaway cluster)"
}

// runInbox runs claim-and-run through the public API and returns transactions per second.
func runInbox(b *testing.B, schema string, withInsert bool, conns int, dur time.Duration) (tps, allocsPerOp float64) {
	var fn inbox.Func
	var ib *inbox.Inbox
	return runLoop(b, conns, dur, func(pool *pgxpool.Pool) {
		ib, fn = benchInbox(b, pool, schema, withInsert)
	}, func(ctx context.Context, key string) error {
		_, err := ib.Run(ctx, "bench", key, fn)
		return err
	})
}

// benchInbox returns an inbox on pool and the work of one event: nothing, or the insert.
func benchInbox(b *testing.B, pool *pgxpool.Pool, schema string, withInsert bool) (*inbox.Inbox, inbox.Func) {
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	insert := `INSERT INTO ` + schema + `.bench_rows (event_id, handler) VALUES ($1, 'inbox')`
	return ib, func(ctx context.Context, tx pgx.Tx) error {
		if !withInsert {
			return nil
		}
		key, _, _ := inbox.EventKey(ctx)
		_, err := tx.Exec(ctx, insert, key)
		return err
	}
}

// runPlainPgx runs pgbench's script through plain pgx (BEGIN, the claim, the insert and COMMIT,
// one round trip each), without the inbox: the Go driver's own rate for the same SQL.
func runPlainPgx(b *testing.B, schema string, withInsert bool, conns int, dur time.Duration) (tps, allocsPerOp float64) {
	claim := `INSERT INTO ` + schema + `.processed_messages (handler, event_id) VALUES ('pgx', $1) ON CONFLICT DO NOTHING`
	insert := `INSERT INTO ` + schema + `.bench_rows (event_id, handler) VALUES ($1, 'pgx')`
	var pool *pgxpool.Pool
	return runLoop(b, conns, dur, func(p *pgxpool.Pool) { pool = p }, func(ctx context.Context, key string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, claim, key); err != nil {
			return err
		}
		if withInsert {
			if _, err := tx.Exec(ctx, insert, key); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	})
}

// runLoop runs op on conns goroutines over a pool of conns connections for dur, each call with a
// fresh key, and returns calls per second and allocations per call. setup gets the pool first.
func runLoop(b *testing.B, conns int, dur time.Duration, setup func(*pgxpool.Pool), op func(ctx context.Context, key string) error) (tps, allocsPerOp float64) {
	pool := newPool(b, int32(conns))
	defer pool.Close() // now, not at the benchmark's end: the rounds' pools would exceed max_connections
	return runLoopOn(b, pool, conns, dur, setup, op)
}

// runLoopOn is runLoop on a pool of the caller's.
func runLoopOn(b *testing.B, pool *pgxpool.Pool, conns int, dur time.Duration, setup func(*pgxpool.Pool), op func(ctx context.Context, key string) error) (tps, allocsPerOp float64) {
	setup(pool)
	// Warm the pool's connections and statement caches outside the timed window.
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			if err := op(context.Background(), "warm-"+strconv.Itoa(i)+randHex(4)); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	var ops atomic.Int64
	prefix := randHex(4) + "-"
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	deadline := time.Now().Add(dur)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			ctx := context.Background()
			for time.Now().Before(deadline) {
				n := ops.Add(1)
				if err := op(ctx, prefix+strconv.FormatInt(n, 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	n := ops.Load()
	return float64(n) / elapsed.Seconds(), float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
}

// batchKeys returns the n event keys of one batched transaction.
func batchKeys(key string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key + "." + strconv.Itoa(i)
	}
	return keys
}

// runInboxBatch runs inbox.RunBatch with size events (the claim and one insert each) and returns
// transactions per second and allocations per transaction.
func runInboxBatch(b *testing.B, schema string, size, conns int, dur time.Duration) (tps, allocsPerOp float64) {
	// The same work as runInbox's with the insert, run as a batch.
	var fn inbox.Func
	var ib *inbox.Inbox
	return runLoop(b, conns, dur, func(pool *pgxpool.Pool) {
		ib, fn = benchInbox(b, pool, schema, true)
	}, func(ctx context.Context, key string) error {
		items := make([]inbox.Item, size)
		for i, k := range batchKeys(key, size) {
			items[i] = inbox.Item{Handler: "bench", Key: k, Fn: fn}
		}
		res, st := ib.RunBatch(ctx, items, nil)
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			if r.Outcome != inbox.Processed {
				return fmt.Errorf("outcome %v, want processed", r.Outcome)
			}
		}
		if st.Fallback || st.Retries > 0 {
			return fmt.Errorf("batch stats %+v: the benchmark's batches share no key", st)
		}
		return nil
	})
}

// runPlainPgxBatch runs pgbench's batched script through plain pgx: BEGIN, size × (SAVEPOINT,
// claim, insert, RELEASE), COMMIT, one round trip each.
func runPlainPgxBatch(b *testing.B, schema string, size, conns int, dur time.Duration) (tps, allocsPerOp float64) {
	claim := `INSERT INTO ` + schema + `.processed_messages (handler, event_id) VALUES ('pgx', $1) ON CONFLICT DO NOTHING`
	insert := `INSERT INTO ` + schema + `.bench_rows (event_id, handler) VALUES ($1, 'pgx')`
	var pool *pgxpool.Pool
	return runLoop(b, conns, dur, func(p *pgxpool.Pool) { pool = p }, func(ctx context.Context, key string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, k := range batchKeys(key, size) {
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, claim, k); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, insert, k); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT s"); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	})
}

// runPgbenchBatch runs pgbench with BEGIN, size × (SAVEPOINT, claim, insert, RELEASE) and END,
// and returns its transactions per second.
func runPgbenchBatch(bin, schema string, size, conns, secs int) (float64, error) {
	script := "BEGIN;\n"
	for i := range size {
		script = fmt.Sprintf("\\set k%d :k * 100 + %d\n", i, i) + script
		k := fmt.Sprintf(":k%d::text", i)
		script += "SAVEPOINT s;\n" +
			"INSERT INTO " + schema + ".processed_messages (handler, event_id) VALUES ('pgbench', " + k + ") ON CONFLICT DO NOTHING;\n" +
			"INSERT INTO " + schema + ".bench_rows (event_id, handler) VALUES (" + k + ", 'pgbench');\n" +
			"RELEASE SAVEPOINT s;\n"
	}
	script = "\\set k random(1, 900000000000000)\n" + script + "END;\n"
	return pgbenchScript(bin, script, conns, secs)
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

func runPgbench(bin, schema string, withInsert bool, conns, secs int) (float64, error) {
	script := "\\set k random(1, 9000000000000000)\nBEGIN;\n" +
		"INSERT INTO " + schema + ".processed_messages (handler, event_id) VALUES ('pgbench', :k::text) ON CONFLICT DO NOTHING;\n"
	if withInsert {
		script += "INSERT INTO " + schema + ".bench_rows (event_id, handler) VALUES (:k::text, 'pgbench');\n"
	}
	script += "END;\n"
	return pgbenchScript(bin, script, conns, secs)
}

// pgbenchScript runs script with pgbench (prepared statements, conns clients, secs seconds) and
// returns its transactions per second.
func pgbenchScript(bin, script string, conns, secs int) (float64, error) {
	dir, err := os.MkdirTemp("", "pgbench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "claim.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return 0, err
	}
	threads := min(conns, runtime.NumCPU())
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(conns), "-j", strconv.Itoa(threads), "-T", strconv.Itoa(secs)}
	verbose := os.Getenv("SQSINBOX_BENCH_PGBENCH_VERBOSE") != ""
	if verbose {
		args = append(args, "-r") // per-statement latencies
	}
	cmd := exec.Command(bin, append(args, "-f", file, db.URL)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	if verbose {
		fmt.Printf("%s\n", out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func pgbenchPath() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "pgbench")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("pgbench")
}

// benchConns returns the connection counts of BenchmarkInboxVsPgbench: 1, 8 and 32, or
// SQSINBOX_BENCH_CONNS (comma-separated).
func benchConns() []int {
	out := []int{1, 8, 32}
	if s := os.Getenv("SQSINBOX_BENCH_CONNS"); s != "" {
		out = out[:0]
		for _, f := range strings.Split(s, ",") {
			if c, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && c > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// keygen makes fresh events: random handler of 4, random uuid key, message id and trace.
type keygen struct{ r *rand.Rand }

func newKeygen() *keygen {
	return &keygen{r: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

func (g *keygen) uuid() [16]byte {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := g.r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

// v7 is a UUIDv7 of time at (its 74 other bits random).
func (g *keygen) v7(at time.Time) string {
	b := g.uuid()
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	return uuidString(b)
}

func uuidString(b [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (g *keygen) batch(n int) []item {
	items := make([]item, n)
	for i := range items {
		tr := g.uuid()
		items[i] = item{handler: fmt.Sprintf("handler.%d", g.r.IntN(handlers)), key: uuidString(g.uuid()), msgID: g.uuid(), trace: tr[:]}
	}
	return items
}

// runResult is one claims run.
type runResult struct {
	events, fresh int
	secs          float64
	lat           []time.Duration // per batch
	st            pssStats
	cpu           time.Duration // the cluster's CPU time during the run
}

// cpuUS is the cluster's CPU time per claim in µs.
func (r runResult) cpuUS() float64 { return float64(r.cpu.Microseconds()) / float64(r.fresh) }

func (r runResult) rate() float64 { return float64(r.fresh) / r.secs }

// runClaims claims events fresh events in batches of batch on workers connections.
func runClaims(ctx context.Context, e *env, l *layout, events, batch, workers int) (runResult, error) {
	var res runResult
	perWorker := events / (batch * workers)
	if e.pss {
		if _, err := e.pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return res, err
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	cpu0 := e.clusterCPU()
	start := now()
	for range workers {
		g.Go(func() error {
			conn, err := e.pool.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			kg := newKeygen()
			lat := make([]time.Duration, 0, perWorker)
			fresh := 0
			for range perWorker {
				items := kg.batch(batch)
				t := time.Now()
				n, err := l.runBatch(gctx, conn.Conn(), items)
				if err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
				lat = append(lat, time.Since(t))
				fresh += n
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.fresh += fresh
			res.events += perWorker * batch
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	res.secs = since(start)
	res.cpu = e.clusterCPU() - cpu0
	if err == nil && e.pss {
		res.st, err = readPSS(ctx, e.pool)
	}
	if err == nil && e.pss && *dumpPSS {
		dumpStatements(ctx, e.pool, l.name)
	}
	return res, err
}

var dumpPSS = flag.Bool("dump", false, "print the top statements of pg_stat_statements after each run")

func dumpStatements(ctx context.Context, pool *pgxpool.Pool, name string) {
	rows, err := pool.Query(ctx, `SELECT calls, round(mean_exec_time::numeric, 3), round(mean_plan_time::numeric, 3), plans,
		round((shared_blks_hit::float8 / calls)::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 8`)
	if err != nil {
		log.Print(err)
		return
	}
	defer rows.Close()
	fmt.Printf("-- %s: calls | mean exec ms | mean plan ms | plans | hits/call | query\n", name)
	for rows.Next() {
		var calls, plans int64
		var ex, pl, hits float64
		var q string
		if err := rows.Scan(&calls, &ex, &pl, &plans, &hits, &q); err != nil {
			log.Print(err)
			return
		}
		fmt.Printf("   %d | %.3f | %.3f | %d | %.1f | %s\n", calls, ex, pl, plans, hits, q)
	}
}

// pssStats sums pg_stat_statements since its reset: all statements, and the claim's own (lock +
// insert: the statements over unnest).
type pssStats struct {
	hit, read, claimHit, claimRead float64
	execMS, claimExecMS            float64
}

func readPSS(ctx context.Context, pool *pgxpool.Pool) (pssStats, error) {
	var s pssStats
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(shared_blks_hit), 0)::float8, coalesce(sum(shared_blks_read), 0)::float8,
		coalesce(sum(shared_blks_hit) FILTER (WHERE query LIKE '%unnest%'), 0)::float8,
		coalesce(sum(shared_blks_read) FILTER (WHERE query LIKE '%unnest%'), 0)::float8,
		coalesce(sum(total_exec_time), 0)::float8, coalesce(sum(total_exec_time) FILTER (WHERE query LIKE '%unnest%'), 0)::float8
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat_statements%'`).Scan(&s.hit, &s.read, &s.claimHit, &s.claimRead, &s.execMS, &s.claimExecMS)
	return s, err
}

// claimLoop claims batches of 10 on workers connections until ctx ends, returning each batch's
// start (since t0) and latency.
type sample struct {
	at, lat time.Duration
}

func claimLoop(ctx context.Context, e *env, l *layout, workers int, t0 time.Time) ([]sample, error) {
	var mu sync.Mutex
	var out []sample
	g := errgroup.Group{}
	for range workers {
		g.Go(func() error {
			conn, err := e.pool.Acquire(context.WithoutCancel(ctx))
			if err != nil {
				return err
			}
			defer conn.Release()
			kg := newKeygen()
			for ctx.Err() == nil {
				items := kg.batch(10)
				t := time.Now()
				if _, err := l.runBatch(context.WithoutCancel(ctx), conn.Conn(), items); err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
				mu.Lock()
				out = append(out, sample{t.Sub(t0), time.Since(t)})
				mu.Unlock()
			}
			return nil
		})
	}
	err := g.Wait()
	return out, err
}

func lats(s []sample) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = x.lat
	}
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	i := int(p / 100 * float64(len(d)-1))
	return d[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func minmax(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	return slices.Min(v), slices.Max(v)
}

// spread formats median [min..max].
func spread(v []float64, format string) string {
	lo, hi := minmax(v)
	return fmt.Sprintf(format+" ["+format+".."+format+"]", median(v), lo, hi)
}

// table prints rows aligned.
func table(title string, header []string, rows [][]string) {
	fmt.Printf("\n### %s\n\n", title)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(w, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t")+"\t")
	}
	_ = w.Flush()
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, out)
	}
	return nil
}

// sizes of a layout's inbox table(s): heap and indexes in MB.
func sizes(ctx context.Context, pool *pgxpool.Pool, l *layout) (heapMB, idxMB float64, err error) {
	q := `SELECT coalesce(sum(pg_table_size(c.oid)), 0)::float8 / 1048576, coalesce(sum(pg_indexes_size(c.oid)), 0)::float8 / 1048576
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND (c.relname = 'processed_messages' OR c.relname LIKE 'pm\_g%')`
	err = pool.QueryRow(ctx, q, l.schema).Scan(&heapMB, &idxMB)
	return
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f0(v float64) string { return fmt.Sprintf("%.0f", v) }

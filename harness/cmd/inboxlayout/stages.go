package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func (l *layout) truncate(ctx context.Context, e *env) error {
	tables := []string{l.schema + ".effects"}
	if l.kind == genTables && !l.shared {
		for g := l.minLive.Load(); g <= l.newest.Load(); g++ {
			tables = append(tables, l.part(g))
		}
	} else {
		tables = append(tables, l.table())
	}
	_, err := e.pool.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", "))
	return err
}

func dropSchemas(ctx context.Context, e *env, schemas ...string) {
	if e.srv != nil {
		return // the whole cluster goes
	}
	for _, s := range schemas {
		if _, err := e.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
			log.Printf("drop schema %s: %v", s, err)
		}
	}
}

// ---- correctness ----

func stageCorrectness(ctx context.Context, e *env, o options) error {
	l1 := newLayout("L1 two statements", partitioned, "c1", 3)
	l1neg := newLayout("L1 ONE statement (negative control)", partitioned, "c1", 3)
	l1neg.oneStatement = true
	l2 := newLayout("L2 two statements", genTables, "c2", 3)
	defer dropSchemas(ctx, e, "c0", "c1", "c2", "s0", "s1", "s1n", "s2")
	for _, l := range []*layout{l1, l2} {
		if err := l.createEmpty(ctx, e.pool); err != nil {
			return err
		}
	}
	var rows [][]string
	for _, c := range []struct{ a, b *layout }{{l1, l1}, {l1, l1neg}, {l2, l2}} {
		for _, commit := range []bool{true, false} {
			r, err := holdAndRace(ctx, e.pool, c.a, c.b, commit)
			if err != nil {
				return fmt.Errorf("%s: %w", c.b.name, err)
			}
			end, want := "rollback", 1
			if commit {
				end, want = "commit", 0
			}
			verdict := "ok"
			if r.bFresh != want || r.rows != 1 || r.effect != 1 {
				verdict = "DOUBLE-APPLIED"
				if r.rows < 1 {
					verdict = "LOST"
				}
			}
			rows = append(rows, []string{c.b.name, end, ms(r.waited) + "+", fmt.Sprint(r.bFresh), fmt.Sprint(r.rows), fmt.Sprint(r.effect), verdict})
		}
	}
	table("Correctness 1: A holds key K uncommitted in gen N; current gen switches to N+1; B claims K (must wait); A ends",
		[]string{"B's protocol", "A", "B blocked ms (still waiting)", "B fresh", "rows of K", "effects of K", "verdict"}, rows)

	s0 := newLayout("L0 single", single, "s0", 1)
	s1 := newLayout("L1 two statements", partitioned, "s1", 3)
	s1n := newLayout("L1 ONE statement (negative control)", partitioned, "s1n", 3)
	s1n.oneStatement = true
	s2 := newLayout("L2 two statements", genTables, "s2", 3)
	rows = nil
	for _, l := range []*layout{s0, s1, s1n, s2} {
		if err := l.createEmpty(ctx, e.pool); err != nil {
			return err
		}
		sw := 100 * time.Millisecond
		if l.kind == single {
			sw = time.Hour
		}
		r, err := stress(ctx, e.pool, l, 16, 200, 3*time.Second, sw)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		rows = append(rows, []string{l.name, fmt.Sprint(r.switches), fmt.Sprint(r.batches), fmt.Sprint(r.fresh), fmt.Sprint(r.keys),
			fmt.Sprint(r.doubles), fmt.Sprint(r.rowDoubles), fmt.Sprint(r.stale)})
	}
	table("Correctness 2: 16 goroutines, batches of 10 out of 200 shared keys, 3 s, current gen switched every 100 ms",
		[]string{"layout", "switches", "batches", "fresh claims", "keys claimed", "keys with >1 effect", "keys with >1 row", "L2 claims retried (stale text)"}, rows)
	return nil
}

// ---- empty inbox ----

func emptyLayouts() []*layout {
	return []*layout{
		newLayout("L0 single", single, "e0", 1),
		newLayout("L1 G=7d (5 gens)", partitioned, "e1g7", 5),
		newLayout("L1 G=14d (3 gens)", partitioned, "e1g14", 3),
		newLayout("L2 G=7d (5 gens)", genTables, "e2g7", 5),
		newLayout("L2 G=14d (3 gens)", genTables, "e2g14", 3),
	}
}

type agg struct {
	rates                     []float64
	hit, claimHit, read       []float64 // per event
	claimRead                 []float64
	execUS, claimUS, p99, p50 []float64
	cpuUS                     []float64
}

func (a *agg) add(r runResult) {
	ev := float64(r.fresh)
	a.rates = append(a.rates, r.rate())
	a.hit = append(a.hit, r.st.hit/ev)
	a.read = append(a.read, r.st.read/ev)
	a.claimHit = append(a.claimHit, r.st.claimHit/ev)
	a.claimRead = append(a.claimRead, r.st.claimRead/ev)
	a.execUS = append(a.execUS, r.st.execMS*1000/ev)
	a.claimUS = append(a.claimUS, r.st.claimExecMS*1000/ev)
	a.cpuUS = append(a.cpuUS, r.cpuUS())
	a.p50 = append(a.p50, float64(pct(r.lat, 50).Microseconds())/1000)
	a.p99 = append(a.p99, float64(pct(r.lat, 99).Microseconds())/1000)
}

// interleave runs every layout once per round, in an order rotated each round, and returns the
// results per layout.
func interleave(ctx context.Context, e *env, o options, ls []*layout, rounds int, truncate func(*layout) bool) ([]*agg, [][]float64, error) {
	aggs := make([]*agg, len(ls))
	for i := range aggs {
		aggs[i] = &agg{}
	}
	perRound := make([][]float64, rounds)
	// Warm-up: prepare the statements, fill the caches; discarded.
	for _, l := range ls {
		if _, err := runClaims(ctx, e, l, 2000, o.batch, o.workers); err != nil {
			return nil, nil, err
		}
	}
	for r := range rounds {
		perRound[r] = make([]float64, len(ls))
		for j := range ls {
			i := (j + r) % len(ls)
			l := ls[i]
			if truncate(l) {
				if err := l.truncate(ctx, e); err != nil {
					return nil, nil, err
				}
			}
			if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
				return nil, nil, err
			}
			res, err := runClaims(ctx, e, l, o.events, o.batch, o.workers)
			if err != nil {
				return nil, nil, err
			}
			aggs[i].add(res)
			perRound[r][i] = res.rate()
			log.Printf("round %d %-28s %7.0f claims/s  p99 %s ms  cpu %.0f µs/claim  claim-stmt hits %.1f/claim", r+1, l.name, res.rate(), ms(pct(res.lat, 99)),
				res.cpuUS(), res.st.claimHit/float64(res.fresh))
		}
	}
	return aggs, perRound, nil
}

func stageEmpty(ctx context.Context, e *env, o options) error {
	rounds := o.rounds
	if rounds == 0 {
		rounds = 10
	}
	ls := emptyLayouts()
	defer dropSchemas(ctx, e, "e0", "e1g7", "e1g14", "e2g7", "e2g14")
	for _, l := range ls {
		if err := l.createEmpty(ctx, e.pool); err != nil {
			return err
		}
	}
	aggs, perRound, err := interleave(ctx, e, o, ls, rounds, func(*layout) bool { return true })
	if err != nil {
		return err
	}
	header := []string{"round"}
	for _, l := range ls {
		header = append(header, l.name)
	}
	var rows [][]string
	for r, pr := range perRound {
		row := []string{fmt.Sprint(r + 1)}
		for _, v := range pr {
			row = append(row, f0(v))
		}
		rows = append(rows, row)
	}
	table(fmt.Sprintf("Empty inbox: claims/s per run (%d events per run, batches of %d, %d connections; truncated + CHECKPOINT before each run; order rotated each round)",
		o.events, o.batch, o.workers), header, rows)
	rows = nil
	for i, l := range ls {
		var ratios, cpuRatios []float64
		for r, pr := range perRound {
			ratios = append(ratios, pr[i]/pr[0])
			cpuRatios = append(cpuRatios, aggs[i].cpuUS[r]/aggs[0].cpuUS[r])
		}
		a := aggs[i]
		rows = append(rows, []string{l.name, spread(a.rates, "%.0f"), spread(ratios, "%.3f"),
			spread(a.cpuUS, "%.0f"), spread(cpuRatios, "%.3f"),
			spread(a.p50, "%.1f"), spread(a.p99, "%.1f"),
			f1(median(a.execUS)), f1(median(a.claimUS)), f1(median(a.hit)), f1(median(a.claimHit))})
	}
	table(fmt.Sprintf("Empty inbox summary, %d rounds: median [min..max]; ratio = this layout / L0 in the same round", rounds),
		[]string{"layout", "claims/s", "throughput vs L0", "server CPU µs/claim", "CPU vs L0", "batch p50 ms", "batch p99 ms", "server µs/claim (all stmts)",
			"server µs/claim (claim stmts)", "buffer hits/claim (all)", "buffer hits/claim (claim stmts)"}, rows)
	return nil
}

// ---- claims: empty vs 50M rows, warm and cold ----

var prewarm = flag.Bool("prewarm", false, "claims: read the loaded layouts' indexes into shared_buffers (pg_prewarm) before the runs")

func stageClaims(ctx context.Context, e *env, o options) error {
	rounds := o.rounds
	if rounds == 0 {
		rounds = 5
	}
	empty := []*layout{
		newLayout("L0 single", single, "e0", 1),
		newLayout("L1 G=7d", partitioned, "e1g7", 5),
		newLayout("L1 G=14d", partitioned, "e1g14", 3),
		newLayout("L2 G=7d", genTables, "e2g7", 5),
	}
	loaded := []*layout{
		newLayout("L0 single", single, "l0", 1),
		newLayout("L1 G=7d", partitioned, "l1g7", 5),
		newLayout("L1 G=14d", partitioned, "l1g14", 3),
		newLayout("L2 G=7d", genTables, "l1g7", 5),
	}
	loaded[3].shared = true
	defer dropSchemas(ctx, e, "e0", "e1g7", "e1g14", "e2g7", "l0", "l1g7", "l1g14")
	for _, l := range empty {
		if err := l.createEmpty(ctx, e.pool); err != nil {
			return err
		}
	}
	start := now()
	jobs := []loadJob{l0Job(e.pool, loaded[0], []slice{{o.rows, seenWithin(28, 0)}})}
	for _, l := range loaded[1:3] {
		j, err := l1Jobs(ctx, e.pool, l, o.rows)
		if err != nil {
			return err
		}
		jobs = append(jobs, j...)
	}
	if err := runJobs(ctx, o.loadPar, jobs); err != nil {
		return err
	}
	if err := execAll(ctx, e.pool, "ANALYZE l1g7.processed_messages", "ANALYZE l1g14.processed_messages", "CHECKPOINT"); err != nil {
		return err
	}
	if *prewarm {
		// The loaded layouts' indexes read into shared_buffers, as a long-running inbox whose
		// indexes fit there has them: the claims then measure the steady state, not the first
		// touch of each index page.
		var pages int64
		if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_prewarm"); err != nil {
			return fmt.Errorf("prewarm (pg_prewarm is in PostgreSQL's contrib): %w", err)
		}
		err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_prewarm(i.indexrelid)), 0) FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('l0', 'l1g7', 'l1g14') AND c.relkind = 'r'`).Scan(&pages)
		if err != nil {
			return fmt.Errorf("prewarm: %w", err)
		}
		log.Printf("prewarmed %d index pages (%.0f MB)", pages, float64(pages)*8/1024)
	}
	loadSecs := since(start)
	var rows [][]string
	for _, l := range loaded[:3] {
		h, i, err := sizes(ctx, e.pool, l)
		if err != nil {
			return err
		}
		rows = append(rows, []string{l.name, fmt.Sprint(o.rows), f0(h), f0(i)})
	}
	table(fmt.Sprintf("Loaded layouts (bulk INSERT ... SELECT generate_series, spread over the live generations; %.0f s to load all)", loadSecs),
		[]string{"layout", "rows", "heap MB", "index MB"}, rows)

	all := append(append([]*layout{}, empty...), loaded...)
	aggs, _, err := interleave(ctx, e, o, all, rounds, func(l *layout) bool { return strings.HasPrefix(l.schema, "e") })
	if err != nil {
		return err
	}
	// Cold runs.
	cold := make([]runResult, len(loaded))
	coldWhat := make([]string, len(loaded))
	for i, l := range loaded {
		what, err := e.cold(ctx)
		if err != nil {
			return err
		}
		coldWhat[i] = what
		if cold[i], err = runClaims(ctx, e, l, o.events, o.batch, o.workers); err != nil {
			return err
		}
		log.Printf("cold %-12s %7.0f claims/s (%s)", l.name, cold[i].rate(), what)
	}
	rows = nil
	n := len(empty)
	for i, l := range loaded {
		ae, al := aggs[i], aggs[n+i]
		var ratios []float64
		for r := range al.rates {
			ratios = append(ratios, al.rates[r]/ae.rates[r])
		}
		c := cold[i]
		ev := float64(c.fresh)
		rows = append(rows, []string{l.name, spread(ae.rates, "%.0f"), spread(al.rates, "%.0f"), spread(ratios, "%.2f"),
			spread(ae.p99, "%.1f"), spread(al.p99, "%.1f"),
			f1(median(ae.claimHit)) + "/" + f1(median(ae.claimRead)),
			f1(median(al.claimHit)) + "/" + f1(median(al.claimRead)),
			f1(median(al.hit)) + "/" + f1(median(al.read)),
			f1(median(ae.claimUS)), f1(median(al.claimUS)), f0(median(ae.cpuUS)), f0(median(al.cpuUS)),
			f0(c.rate()), f1(c.st.claimHit/ev) + "/" + f1(c.st.claimRead/ev), ms(pct(c.lat, 99))})
	}
	table(fmt.Sprintf("Claims, batches of %d, %d connections, %d events per run, %d interleaved rounds (empty truncated before each run; loaded = %d rows): median [min..max]",
		o.batch, o.workers, o.events, rounds, o.rows),
		[]string{"layout", "empty claims/s", "loaded claims/s", "loaded/empty (same round)", "empty p99 ms", "loaded p99 ms",
			"empty claim-stmt hit/read per claim", "loaded claim-stmt hit/read per claim", "loaded all-stmt hit/read per claim",
			"empty claim-stmt µs/claim", "loaded claim-stmt µs/claim", "empty CPU µs/claim", "loaded CPU µs/claim",
			"COLD loaded claims/s", "COLD claim-stmt hit/read per claim", "COLD p99 ms"}, rows)
	fmt.Printf("\ncold runs: %s\n", strings.Join(coldWhat, "; "))
	// One EXPLAIN per loaded layout (warm after the cold run of the last one; rolled back).
	for _, l := range loaded {
		if err := explainClaim(ctx, e, l); err != nil {
			return err
		}
	}
	return nil
}

// explainClaim prints EXPLAIN (ANALYZE, BUFFERS) of one claim of a fresh batch of 10, rolled back.
func explainClaim(ctx context.Context, e *env, l *layout) error {
	items := newKeygen().batch(10)
	args := claimArgs(items)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if l.kind != single {
		if _, err := tx.Exec(ctx, lockSQL(), args[0], args[1]); err != nil {
			return err
		}
	}
	switch l.kind {
	case partitioned:
		args = append(args, l.cur.Load(), l.minLive.Load())
	case genTables:
		args = append(args, l.cur.Load())
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) "+l.claimSQL(), args...)
	if err != nil {
		return err
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	fmt.Printf("\nEXPLAIN (ANALYZE, BUFFERS) of one claim of 10 fresh keys, %s (%s):\n", l.name, l.schema)
	for _, line := range plan {
		fmt.Println("    " + line)
	}
	return nil
}

// ---- forget ----

func stageForget(ctx context.Context, e *env, o options) error {
	ns, err := ints64(o.forgetRows)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if err := forgetOne(ctx, e, o, n); err != nil {
			return err
		}
	}
	return nil
}

func ints64(s string) ([]int64, error) {
	var out []int64
	for _, v := range strings.Split(s, ",") {
		var n int64
		if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err != nil {
			return nil, fmt.Errorf("bad number %q", v)
		}
		out = append(out, n)
	}
	return out, nil
}

type loopStats struct {
	batches                     int
	p50, p99, max, opMax, opP99 time.Duration
	opBatches                   int
}

// loopAround runs a claim loop on l for window, running op (if any) after lead; it returns the
// loop's latencies and the worst latency of the batches that overlapped op.
func loopAround(ctx context.Context, e *env, l *layout, window, lead time.Duration, op func() error) (loopStats, error) {
	var st loopStats
	lctx, cancel := context.WithCancel(ctx)
	t0 := now()
	type out struct {
		s   []sample
		err error
	}
	done := make(chan out, 1)
	go func() {
		s, err := claimLoop(lctx, e, l, 4, t0)
		done <- out{s, err}
	}()
	var opStart, opEnd time.Duration
	var opErr error
	if op != nil {
		time.Sleep(lead)
		opStart = time.Since(t0)
		opErr = op()
		opEnd = time.Since(t0)
	}
	if rest := window - time.Since(t0); rest > 0 {
		time.Sleep(rest)
	}
	cancel()
	r := <-done
	if opErr != nil {
		return st, opErr
	}
	if r.err != nil {
		return st, r.err
	}
	d := lats(r.s)
	st.batches, st.p50, st.p99, st.max = len(d), pct(d, 50), pct(d, 99), pct(d, 100)
	var during []time.Duration
	for _, s := range r.s {
		if op != nil && s.at < opEnd && s.at+s.lat > opStart {
			during = append(during, s.lat)
		}
	}
	st.opBatches, st.opMax, st.opP99 = len(during), pct(during, 100), pct(during, 99)
	return st, nil
}

func forgetOne(ctx context.Context, e *env, o options, n int64) error {
	trials, direct := 1, 0
	if n <= 2_000_000 {
		trials, direct = 2, 1
	}
	l1 := newLayout("L1 G=7d", partitioned, "f1", 5)
	l0 := newLayout("L0 single", single, "f0", 1)
	defer dropSchemas(ctx, e, "f0", "f1")
	if err := l1Parent(ctx, e.pool, l1); err != nil {
		return err
	}
	old := int32(990)
	jobs := []loadJob{l0Job(e.pool, l0, []slice{{n, seenWithin(41, 40)}, {o.liveRows, seenWithin(1, 0)}})}
	for g := range int32(trials + direct) {
		jobs = append(jobs, l1PartJob(e.pool, l1, old+g, n, seenWithin(41, 40)))
	}
	jobs = append(jobs, l1PartJob(e.pool, l1, baseGen, o.liveRows, seenWithin(1, 0)))
	for g := l1.minLive.Load(); g <= l1.newest.Load(); g++ {
		if g != baseGen {
			jobs = append(jobs, l1PartJob(e.pool, l1, g, 0, ""))
		}
	}
	if err := runJobs(ctx, o.loadPar, jobs); err != nil {
		return err
	}
	if err := execAll(ctx, e.pool, "ANALYZE f1.processed_messages", "CHECKPOINT"); err != nil {
		return err
	}
	const window, lead = 8 * time.Second, 2 * time.Second
	var rows [][]string
	row := func(what string, st loopStats, extra ...string) {
		r := []string{what, fmt.Sprint(st.batches), ms(st.p50), ms(st.p99), ms(st.max), fmt.Sprint(st.opBatches), ms(st.opP99), ms(st.opMax)}
		rows = append(rows, append(r, extra...))
	}
	h0, i0, _ := sizes(ctx, e.pool, l1)
	for t := range trials {
		st, err := loopAround(ctx, e, l1, window, 0, nil)
		if err != nil {
			return err
		}
		row("L1 no drop (baseline)", st, "", "", "")
		var dt dropTimes
		g := old + int32(t)
		st, err = loopAround(ctx, e, l1, window, lead, func() error {
			var err error
			dt, err = detachDrop(ctx, e.pool, l1, g)
			return err
		})
		if err != nil {
			return err
		}
		row(fmt.Sprintf("L1 DETACH CONCURRENTLY + DROP gen %d", g), st, fmt.Sprintf("detach %.3f s + drop %.3f s", dt.detach, dt.drop),
			fmt.Sprint(dt.dropTries), "")
	}
	h1, i1, _ := sizes(ctx, e.pool, l1)
	for t := range direct {
		g := old + int32(trials+t)
		var tries int
		var secs float64
		st, err := loopAround(ctx, e, l1, window, lead, func() error {
			conn, err := e.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET lock_timeout = '100ms'"); err != nil {
				return err
			}
			s := now()
			tries, err = dropRetry(ctx, conn.Conn(), "DROP TABLE "+l1.part(g))
			secs = since(s)
			_, _ = conn.Exec(ctx, "RESET lock_timeout")
			return err
		})
		if err != nil {
			return err
		}
		row(fmt.Sprintf("L1 direct DROP (no detach) gen %d", g), st, fmt.Sprintf("drop %.3f s", secs), fmt.Sprint(tries), "")
	}
	// L0: DELETE the same rows in batches of 1000, as pgpurge does.
	st, err := loopAround(ctx, e, l0, window, 0, nil)
	if err != nil {
		return err
	}
	row("L0 no purge (baseline)", st, "", "", "")
	hb, ib, _ := sizes(ctx, e.pool, l0)
	var deleted int64
	var batches int
	var purgeSecs float64
	st, err = loopAround(ctx, e, l0, 0, lead, func() error {
		s := now()
		var err error
		deleted, batches, err = purgeL0(ctx, e, l0, 28*24*time.Hour)
		purgeSecs = since(s)
		return err
	})
	if err != nil {
		return err
	}
	row("L0 DELETE purge, batches of 1000", st, fmt.Sprintf("%.1f s (%d rows, %d stmts)", purgeSecs, deleted, batches), "", "")
	time.Sleep(1500 * time.Millisecond) // the statistics flush
	ha, ia, _ := sizes(ctx, e.pool, l0)
	var dead, avCount int64
	_ = e.pool.QueryRow(ctx, "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'f0' AND relname = 'processed_messages'").Scan(&dead, &avCount)
	vs := now()
	if err := execAll(ctx, e.pool, "VACUUM f0.processed_messages"); err != nil {
		return err
	}
	vacSecs := since(vs)
	hv, iv, _ := sizes(ctx, e.pool, l0)
	table(fmt.Sprintf("Forgetting %d rows, claim loop of 4 connections x batches of 10 (live rows besides: %d); op starts %v into an %v window (L0 purge: the window ends with the purge)",
		n, o.liveRows, lead, window),
		[]string{"run", "batches", "p50 ms", "p99 ms", "max ms", "batches overlapping op", "their p99 ms", "their max ms", "op time", "drop tries", ""}, rows)
	table(fmt.Sprintf("Sizes, forgetting %d rows", n), []string{"what", "heap MB", "index MB", "note"}, [][]string{
		{"L1 before (all gens)", f0(h0), f0(i0), ""},
		{fmt.Sprintf("L1 after %d detach+drop", trials), f0(h1), f0(i1), "files removed at once"},
		{"L0 before purge", f0(hb), f0(ib), ""},
		{"L0 after purge", f0(ha), f0(ia), fmt.Sprintf("n_dead_tup %d, autovacuum runs so far %d", dead, avCount)},
		{"L0 after VACUUM", f0(hv), f0(iv), fmt.Sprintf("VACUUM took %.1f s; space reusable, not returned", vacSecs)},
	})
	return nil
}

// purgeL0 deletes L0's rows older than age, 1000 per statement, with today's statement.
func purgeL0(ctx context.Context, e *env, l *layout, age time.Duration) (int64, int, error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Release()
	var horizon time.Time
	if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1)", age.Seconds()).Scan(&horizon); err != nil {
		return 0, 0, err
	}
	del := "DELETE FROM " + l.table() + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + l.table() + " WHERE seen_at < $1 LIMIT $2))"
	var total int64
	for batches := 1; ; batches++ {
		tag, err := conn.Exec(ctx, del, horizon, 1000)
		if err != nil {
			return total, batches, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 1000 {
			// Flush this backend's statistics now, so n_dead_tup is current.
			_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
			_, _ = conn.Exec(ctx, "SELECT 1")
			return total, batches, nil
		}
	}
}

// ---- xmin ----

func stageXmin(ctx context.Context, e *env, o options) error {
	l0 := newLayout("L0 single + DELETE purge", single, "x0", 1)
	l1 := newLayout("L1 G=7d + detach/drop", partitioned, "x1", 5)
	defer dropSchemas(ctx, e, "x0", "x1")
	var sl []slice
	for j := range 5 {
		sl = append(sl, slice{o.xminGenRows, seenWithin(float64(35-7*j), float64(28-7*j))})
	}
	jobs := []loadJob{l0Job(e.pool, l0, sl)}
	j1, err := l1Jobs(ctx, e.pool, l1, o.xminGenRows*5)
	if err != nil {
		return err
	}
	if err := runJobs(ctx, o.loadPar, append(jobs, j1...)); err != nil {
		return err
	}
	if err := execAll(ctx, e.pool, "ANALYZE x1.processed_messages", "CHECKPOINT"); err != nil {
		return err
	}
	// The held xmin: a REPEATABLE READ transaction in the same database, with a snapshot, that
	// touches neither inbox.
	holder, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer holder.Release()
	htx, err := holder.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = htx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := htx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return err
	}
	var xmin string
	if err := htx.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'x' UNION ALL SELECT 0 LIMIT 1").Scan(new(int64)); err != nil {
		return err
	}
	_ = htx.QueryRow(ctx, "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&xmin)
	log.Printf("holding a snapshot: backend_xmin %s", xmin)

	chunk := o.xminChunk
	chunks := o.xminClaims / chunk
	rotAt := map[int]bool{chunks / 3: true, 2 * chunks / 3: true}
	var rows [][]string
	purgeAge := 28.0 // days: L0's horizon moves with L1's generations
	ls := []*layout{l0, l1}
	for c := range chunks {
		note := ""
		if rotAt[c] && c > 0 {
			s := now()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := l1.rotate(rctx, e.pool, true)
			cancel()
			if err != nil {
				note += "L1 rotation FAILED: " + err.Error()
			} else {
				note += fmt.Sprintf("L1 rotated (create+attach, detach+drop) %.2f s; ", since(s))
			}
			s = now()
			n, b, err := purgeL0(ctx, e, l0, time.Duration(purgeAge*24)*time.Hour)
			if err != nil {
				return err
			}
			note += fmt.Sprintf("L0 purged %d rows in %d stmts %.1f s", n, b, since(s))
			purgeAge -= 7
		}
		rates := make([]float64, 2)
		for j := range ls {
			i := (j + c) % 2
			if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			r, err := runClaims(ctx, e, ls[i], chunk, o.batch, o.workers)
			if err != nil {
				return err
			}
			rates[i] = r.rate()
		}
		row := []string{fmt.Sprintf("%dk", (c+1)*chunk/1000)}
		for i, l := range ls {
			h, ix, err := sizes(ctx, e.pool, l)
			if err != nil {
				return err
			}
			row = append(row, f0(rates[i]), f0(h), f0(ix))
		}
		var dead int64
		_ = e.pool.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'x0' AND relname = 'processed_messages'").Scan(&dead)
		row = append(row, fmt.Sprint(dead), note)
		rows = append(rows, row)
		log.Printf("xmin chunk %d: %v", c+1, row)
	}
	table(fmt.Sprintf("Held xmin (REPEATABLE READ snapshot open throughout, backend_xmin %s), %d claims per layout in chunks of %dk interleaved, %d preloaded rows per generation",
		xmin, chunks*chunk, chunk/1000, o.xminGenRows),
		[]string{"claims", "L0 claims/s", "L0 heap MB", "L0 index MB", "L1 claims/s", "L1 heap MB", "L1 index MB", "L0 n_dead_tup", "rotation"}, rows)
	return nil
}

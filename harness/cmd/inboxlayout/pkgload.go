package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// stagePackage measures the inbox package's claims with -rows rows already in the inbox, against
// the same layout empty, in interleaved rounds: the table layout with random (UUIDv4) keys and
// with UUIDv7 keys, the generations layout (G = 14 d) with random keys, and the keytime layout
// (G = 14 d) with UUIDv7 keys. The rows are bulk-loaded (generate_series, indexes built after),
// spread over the default retention of 28 days, their keys of the same kind as the claims' (a
// UUIDv7's time is its row's seen_at). Then one cold run per loaded layout (the cluster
// restarted, the OS cache dropped), with the shared buffers read per claim.
func stagePackage(ctx context.Context, e *env, o options) error {
	rounds := o.rounds
	if rounds == 0 {
		rounds = 5
	}
	const g14 = 14 * 24 * time.Hour
	kinds := []implLayout{
		{name: "table, random keys"},
		{name: "table, UUIDv7 keys", v7: true},
		{name: "generations G = 14 d, random keys", g: g14},
		{name: "keytime G = 14 d, UUIDv7 keys", g: g14, keyTime: true, v7: true},
	}
	var empty, loaded []*implLayout
	var schemas []string
	for i, k := range kinds {
		em, lo := k, k
		em.schema, lo.schema = fmt.Sprintf("pkg_e%d", i), fmt.Sprintf("pkg_l%d", i)
		empty, loaded = append(empty, &em), append(loaded, &lo)
		schemas = append(schemas, em.schema, lo.schema)
	}
	defer dropSchemas(ctx, e, schemas...)
	for _, l := range append(append([]*implLayout{}, empty...), loaded...) {
		if err := l.open(ctx, e, o.workers); err != nil {
			return err
		}
		defer l.pool.Close()
	}
	start := now()
	var jobs []loadJob
	for _, l := range loaded {
		j, err := l.loadJobs(ctx, e, o.rows)
		if err != nil {
			return err
		}
		jobs = append(jobs, j...)
	}
	if err := runJobs(ctx, o.loadPar, jobs); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	loadSecs := since(start)
	var rows [][]string
	for _, l := range loaded {
		var heap, idx float64
		err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(c.oid)), 0) / 1e6, coalesce(sum(pg_indexes_size(c.oid)), 0) / 1e6
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND (c.relname = 'processed_messages' OR c.relname LIKE 'processed\_events\_g%')`, l.schema).Scan(&heap, &idx)
		if err != nil {
			return err
		}
		rows = append(rows, []string{l.name, fmt.Sprint(o.rows), f0(heap), f0(idx)})
	}
	table(fmt.Sprintf("Loaded inboxes of the inbox package (bulk-loaded over 28 days; %.0f s to load all)", loadSecs),
		[]string{"layout", "rows", "heap MB", "index MB"}, rows)

	// Warm-up, discarded: prepares the statements.
	for _, l := range append(append([]*implLayout{}, empty...), loaded...) {
		if _, err := l.run(ctx, e, 2000, o.batch, o.workers); err != nil {
			return err
		}
	}
	all := append(append([]*implLayout{}, empty...), loaded...)
	rates := make([][]float64, len(all))
	reads, hits := make([][]float64, len(all)), make([][]float64, len(all))
	for r := range rounds {
		for j := range all {
			i := (j + r) % len(all)
			l := all[i]
			if i < len(empty) {
				if err := l.truncate(ctx); err != nil {
					return err
				}
			}
			res, err := l.measured(ctx, e, o)
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], res.rate())
			reads[i], hits[i] = append(reads[i], res.st.claimRead/float64(res.fresh)), append(hits[i], res.st.claimHit/float64(res.fresh))
			log.Printf("round %d %-40s %-7s %7.0f claims/s  claim reads %.2f hits %.1f per claim", r+1, l.name, l.schema, res.rate(),
				res.st.claimRead/float64(res.fresh), res.st.claimHit/float64(res.fresh))
		}
	}
	cold := make([]runResult, len(loaded))
	var coldWhat []string
	for i, l := range loaded {
		what, err := e.cold(ctx)
		if err != nil {
			return err
		}
		coldWhat = append(coldWhat, what)
		// The pools' connections died with the server.
		l.pool.Reset()
		if cold[i], err = l.measured(ctx, e, o); err != nil {
			return err
		}
		log.Printf("cold %-40s %7.0f claims/s (%s)", l.name, cold[i].rate(), what)
	}
	rows = nil
	n := len(empty)
	for i, l := range loaded {
		var ratios []float64
		for r := range rates[n+i] {
			ratios = append(ratios, rates[n+i][r]/rates[i][r])
		}
		c := cold[i]
		rows = append(rows, []string{l.name, spread(rates[i], "%.0f"), spread(rates[n+i], "%.0f"), spread(ratios, "%.2f"),
			f1(median(hits[i])) + "/" + f1(median(reads[i])), f1(median(hits[n+i])) + "/" + f1(median(reads[n+i])),
			f0(c.rate()), f1(c.st.claimHit/float64(c.fresh)) + "/" + f1(c.st.claimRead/float64(c.fresh))})
	}
	table(fmt.Sprintf("The inbox package's claims (RunBatch, batches of %d, %d connections, %d events a run, one business insert each), %d interleaved rounds; empty truncated before each run, loaded = %d rows: median [min..max]",
		o.batch, o.workers, o.events, rounds, o.rows),
		[]string{"layout", "empty claims/s", "loaded claims/s", "loaded/empty (same round)", "empty claim hit/read per claim",
			"loaded claim hit/read per claim", "COLD loaded claims/s", "COLD claim hit/read per claim"}, rows)
	fmt.Printf("\ncold runs: %s\n", strings.Join(coldWhat, "; "))
	return nil
}

// measured is run with the cluster's statement counters reset before and read after (the claim's
// statements are those over unnest).
func (l *implLayout) measured(ctx context.Context, e *env, o options) (runResult, error) {
	if e.pss {
		if _, err := e.pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return runResult{}, err
		}
	}
	res, err := l.run(ctx, e, o.events, o.batch, o.workers)
	if err == nil && e.pss {
		res.st, err = readPSS(ctx, e.pool)
	}
	return res, err
}

// loadJobs fills l's inbox (opened: migrated, switched) with rows rows, spread evenly over the
// last 28 days: one job for the table layout (its indexes dropped, rows inserted, indexes made
// again), one per generation for the others (the generation's table made apart, filled, indexed
// and attached in place of the empty one the switch made).
func (l *implLayout) loadJobs(ctx context.Context, e *env, rows int64) ([]loadJob, error) {
	var t0 time.Time
	if err := e.pool.QueryRow(ctx, "SELECT now()").Scan(&t0); err != nil {
		return nil, err
	}
	lo, hi := t0.Add(-28*24*time.Hour), t0.Add(-time.Minute)
	if l.g == 0 {
		return []loadJob{{name: l.name, run: func(ctx context.Context) error {
			return l.loadTable(ctx, e, rows, lo, hi)
		}}}, nil
	}
	gsecs := int64(l.g / time.Second)
	var jobs []loadJob
	total := hi.Sub(lo).Seconds()
	for g := lo.Unix() / gsecs; g <= hi.Unix()/gsecs; g++ {
		from, to := time.Unix(max(g*gsecs, lo.Unix()), 0), time.Unix(min((g+1)*gsecs, hi.Unix()), 0)
		n := int64(float64(rows) * to.Sub(from).Seconds() / total)
		jobs = append(jobs, loadJob{name: fmt.Sprintf("%s gen %d (%d rows)", l.name, g, n), run: func(ctx context.Context) error {
			return l.loadGeneration(ctx, e, int32(g), n, from, to)
		}})
	}
	return jobs, nil
}

// rowsFrom is the SELECT of n rows with seen_at spread evenly over [from, to) in order, their keys
// UUIDv7s of that time (v7) or random, and gen when gen is not "".
func (l *implLayout) rowsFrom(n int64, from, to time.Time, gen string) string {
	ms := fmt.Sprintf("(%d + (i - 1) * %d::bigint / %d)", from.UnixMilli(), to.Sub(from).Milliseconds(), n)
	key := "gen_random_uuid()::text"
	if l.v7 {
		// 48 bits of milliseconds, the version, 12 bits, the variant, 62 bits: from md5(i).
		key = "lpad(to_hex(" + ms + " >> 16), 8, '0') || '-' || lpad(to_hex(" + ms + " & 65535), 4, '0') || '-7' || substr(h, 1, 3) || '-' || " +
			"substr('89ab', 1 + (i % 4)::int, 1) || substr(h, 4, 3) || '-' || substr(h, 7, 12)"
	}
	return fmt.Sprintf("SELECT 'handler.' || (i %% %d), %s, %sto_timestamp(%s / 1000.0), 1, gen_random_uuid(), 1, uuid_send(gen_random_uuid()) "+
		"FROM generate_series(1, %d) i, LATERAL (SELECT md5(i::text || '%d')) m(h)", handlers, key, gen, ms, n, from.UnixNano())
}

func (l *implLayout) loadTable(ctx context.Context, e *env, n int64, from, to time.Time) error {
	return l.loadTableSlices(ctx, e, []tslice{{n, from, to}})
}

func (l *implLayout) loadGeneration(ctx context.Context, e *env, g int32, n int64, from, to time.Time) error {
	parent, p := l.schema+".processed_events", fmt.Sprintf("%s.processed_events_g%d", l.schema, g)
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", p).Scan(&exists); err != nil {
			return err
		}
		if exists {
			if err := execTx(ctx, tx, "ALTER TABLE "+parent+" DETACH PARTITION "+p, "DROP TABLE "+p); err != nil {
				return err
			}
		}
		return execTx(ctx, tx,
			"CREATE TABLE "+p+" (LIKE "+parent+" INCLUDING DEFAULTS)",
			"INSERT INTO "+p+" (handler, event_id, gen, seen_at, source, message_id, receive_count, trace_id) "+l.rowsFrom(n, from, to, fmt.Sprintf("%d, ", g)),
			fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (handler, event_id, gen), ADD CONSTRAINT gen_check CHECK (gen = %d)", p, g),
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%d)", parent, p, g))
	})
	if err != nil {
		return err
	}
	_, err = e.pool.Exec(ctx, "VACUUM (ANALYZE) "+p)
	return err
}

func execTx(ctx context.Context, tx pgx.Tx, stmts ...string) error {
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("%.80s: %w", s, err)
		}
	}
	return nil
}

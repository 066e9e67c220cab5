package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// stagePkgForget measures the inbox package's purge (PurgeOlderThan, as the purge loop runs it;
// in the generations layout Rotate, which it runs, for the detach and drop times)
// forgetting n rows past the retention (each of -forget-rows), beside -live-rows rows within it:
// in the generations layout (G = 14 d) a rotation drops the generation that holds them; in the
// table layout the purge DELETEs them in batches. Claims run through the package throughout
// (RunBatch, batches of -batch on -workers connections); their p99 while the purge runs is set
// against theirs in the -lead before it. Table and index sizes and dead tuples after each.
func stagePkgForget(ctx context.Context, e *env, o options) error {
	ns, err := ints64(o.forgetRows)
	if err != nil {
		return err
	}
	var rows [][]string
	for _, n := range ns {
		for _, l := range []*implLayout{
			{name: "table", schema: "pf_t"},
			{name: "generations G = 14 d", schema: "pf_g", g: 14 * 24 * time.Hour},
		} {
			row, err := forgetPkg(ctx, e, o, l, n)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	table(fmt.Sprintf("Forgetting through the inbox package (PurgeOlderThan(28 d)), %d live rows besides; claims running throughout (RunBatch, batches of %d, %d connections)",
		o.liveRows, o.batch, o.workers),
		[]string{"layout", "rows forgotten", "purge s", "detach + drop s", "claim p99 before ms", "claim p99 during ms", "slowest claim batch overlapping ms", "claims during", "heap MB after", "index MB after", "dead tuples after"}, rows)
	return nil
}

func forgetPkg(ctx context.Context, e *env, o options, l *implLayout, n int64) ([]string, error) {
	defer dropSchemas(ctx, e, l.schema)
	if err := l.open(ctx, e, o.workers); err != nil {
		return nil, err
	}
	defer l.pool.Close()
	jobs, err := l.loadJobs(ctx, e, o.liveRows)
	if err != nil {
		return nil, err
	}
	// The rows to forget: in [now - 43 d, now - 29 d), older than the retention and its margins;
	// in the generations layout, all in one generation (the one of now - 43 d, which ends before
	// now - 29 d).
	var t0 time.Time
	if err := e.pool.QueryRow(ctx, "SELECT now()").Scan(&t0); err != nil {
		return nil, err
	}
	from := t0.Add(-43 * 24 * time.Hour)
	to := t0.Add(-29 * 24 * time.Hour)
	if l.g > 0 {
		gsecs := int64(l.g / time.Second)
		g := from.Unix() / gsecs
		from, to = time.Unix(g*gsecs, 0), time.Unix((g+1)*gsecs, 0)
		jobs = append(jobs, loadJob{name: fmt.Sprintf("%s: %d rows to forget", l.name, n), run: func(ctx context.Context) error {
			return l.loadGeneration(ctx, e, int32(g), n, from, to)
		}})
	} else {
		jobs[0] = loadJob{name: l.name, run: func(ctx context.Context) error {
			return l.loadTableSlices(ctx, e, []tslice{{o.liveRows, t0.Add(-27 * 24 * time.Hour), t0.Add(-time.Minute)}, {n, from, to}})
		}}
	}
	if err := runJobs(ctx, o.loadPar, jobs); err != nil {
		return nil, err
	}
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	if _, err := l.run(ctx, e, 2000, o.batch, o.workers); err != nil { // warm-up
		return nil, err
	}
	// Claims throughout; the purge after o.lead.
	lctx, cancel := context.WithCancel(ctx)
	var samples []sample
	var lerr error
	var wg sync.WaitGroup
	start := now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		samples, lerr = l.loop(lctx, o, start)
	}()
	select {
	case <-time.After(o.lead):
	case <-ctx.Done():
	}
	p0 := time.Since(start)
	var res inbox.PurgeResult
	var rot inbox.Rotation
	if l.g > 0 {
		// Rotate is what PurgeOlderThan runs in this layout, with the detach and drop times.
		rot, err = l.ib.Rotate(ctx, inbox.DefaultRetention)
		res = inbox.PurgeResult{Deleted: rot.Rows, Batches: len(rot.Dropped)}
	} else {
		res, err = l.ib.PurgeOlderThan(ctx, inbox.DefaultRetention, nil)
	}
	p1 := time.Since(start)
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if lerr != nil && ctx.Err() == nil {
		return nil, lerr
	}
	var before, during []time.Duration
	var worst time.Duration
	for _, s := range samples {
		if s.at < p1 && s.at+s.lat > p0 {
			worst = max(worst, s.lat) // overlapped the purge
		}
		switch {
		case s.at+s.lat < p0:
			before = append(before, s.lat)
		case s.at < p1:
			during = append(during, s.lat)
		}
	}
	log.Printf("%s: purge of %d rows (%d reported, %d generations or batches) in %.2f s", l.name, n, res.Deleted, res.Batches, (p1 - p0).Seconds())
	var heap, idx float64
	var dead int64
	if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pgstattuple"); err != nil {
		return nil, fmt.Errorf("pgstattuple (in PostgreSQL's contrib) counts the dead tuples: %w", err)
	}
	// pgstattuple reads the tables: exact, where the statistics views lag behind.
	err = e.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(c.oid)), 0) / 1e6, coalesce(sum(pg_indexes_size(c.oid)), 0) / 1e6,
coalesce(sum((pgstattuple(c.oid)).dead_tuple_count), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND (c.relname = 'processed_messages' OR c.relname LIKE 'processed\_events\_g%')`, l.schema).Scan(&heap, &idx, &dead)
	if err != nil {
		return nil, err
	}
	split := "-"
	if l.g > 0 {
		split = fmt.Sprintf("%.3f + %.2f", rot.Detach.Seconds(), rot.Drop.Seconds())
	}
	return []string{l.name, fmt.Sprint(n), fmt.Sprintf("%.2f", (p1 - p0).Seconds()), split, ms(pct(before, 99)), ms(pct(during, 99)), ms(worst),
		fmt.Sprint(len(during) * o.batch), f0(heap), f0(idx), fmt.Sprint(dead)}, nil
}

// loop claims fresh events through RunBatch on -workers goroutines until ctx ends, returning each
// batch's start (since t0) and latency.
func (l *implLayout) loop(ctx context.Context, o options, t0 time.Time) ([]sample, error) {
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	var first error
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kg := newKeygen()
			var mine []sample
			defer func() {
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				var items []inbox.Item
				for _, it := range kg.batch(o.batch) {
					key := it.key
					items = append(items, inbox.Item{Handler: it.handler, Key: key, Fn: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "INSERT INTO "+l.schema+".effects (event_id, handler) VALUES ($1, $2)", key, "h")
						return err
					}})
				}
				at := time.Since(t0)
				res, _ := l.ib.RunBatch(ctx, items, nil)
				lat := time.Since(t0) - at
				for _, r := range res {
					if r.Err != nil && ctx.Err() == nil {
						mu.Lock()
						first = r.Err
						mu.Unlock()
						return
					}
				}
				if ctx.Err() == nil {
					mine = append(mine, sample{at: at, lat: lat})
				}
			}
		}()
	}
	wg.Wait()
	return out, first
}

// tslice is n rows with seen_at spread over [from, to).
type tslice struct {
	n        int64
	from, to time.Time
}

// loadTableSlices is loadTable with several slices.
func (l *implLayout) loadTableSlices(ctx context.Context, e *env, slices []tslice) error {
	t := l.schema + ".processed_messages"
	// TRUNCATE in this transaction: on a wal_level=minimal cluster the rows skip the WAL.
	stmts := []string{"TRUNCATE " + t, "ALTER TABLE " + t + " DROP CONSTRAINT processed_messages_pkey", "DROP INDEX " + l.schema + ".processed_messages_seen_at_idx"}
	for _, s := range slices {
		stmts = append(stmts, "INSERT INTO "+t+" (handler, event_id, seen_at, source, message_id, receive_count, trace_id) "+l.rowsFrom(s.n, s.from, s.to, ""))
	}
	stmts = append(stmts, "ALTER TABLE "+t+" ADD PRIMARY KEY (handler, event_id)", "CREATE INDEX processed_messages_seen_at_idx ON "+t+" (seen_at)", "ANALYZE "+t)
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return execTx(ctx, tx, stmts...) })
}

package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// stagePkgXmin measures the inbox package under a held xmin: one REPEATABLE READ transaction,
// its snapshot taken, is kept open through the whole run of each layout, so vacuum can remove no
// row deleted after it began. -xmin-claims fresh events are claimed through RunBatch in chunks of
// -xmin-chunk; after each chunk the purge runs as the purge loop would (PurgeOlderThan of a
// 2-minute retention) and the inbox's size on disk is read. Two generations of -xmin-gen-rows
// rows each, loaded before the run, pass the retention about 1.5 and 3.5 minutes in (a
// generation is dropped 10 minutes after it passes, the clocks' margin), so the generations
// layout (G = 1 min) rotates them out twice while claims go on; the table layout gets the same
// rows, which its DELETE purge forgets from the first chunk on, along with every claimed row
// older than 2 minutes.
func stagePkgXmin(ctx context.Context, e *env, o options) error {
	var rows [][]string
	type run struct {
		rates, sizes []float64
		purges       []float64
	}
	runs := map[string]*run{}
	var ls []*implLayout
	for _, l := range []*implLayout{
		{name: "table", schema: "px_t"},
		{name: "generations G = 1 min", schema: "px_g", g: time.Minute},
		{name: "keytime G = 1 min, UUIDv7 keys", schema: "px_k", g: time.Minute, keyTime: true, v7: true},
	} {
		if strings.Contains(","+o.xminLayouts+",", ","+strings.Fields(l.name)[0]+",") {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return fmt.Errorf("-xmin-layouts %q names none of table, generations, keytime", o.xminLayouts)
	}
	for _, l := range ls {
		r := &run{}
		runs[l.name] = r
		if err := xminPkg(ctx, e, o, l, func(rate, sizeMB, purgeS float64) {
			r.rates, r.sizes, r.purges = append(r.rates, rate), append(r.sizes, sizeMB), append(r.purges, purgeS)
		}); err != nil {
			return err
		}
	}
	chunks := len(runs[ls[0].name].rates)
	for i := range chunks {
		row := []string{fmt.Sprint((i + 1) * o.xminChunk)}
		for _, l := range ls {
			r := runs[l.name]
			if i < len(r.rates) {
				row = append(row, f0(r.rates[i]), f0(r.sizes[i]), fmt.Sprintf("%.2f", r.purges[i]))
			}
		}
		rows = append(rows, row)
	}
	header := []string{"claims so far"}
	for _, l := range ls {
		header = append(header, l.name+" claims/s", l.name+" MB", l.name+" purge s")
	}
	table(fmt.Sprintf("The inbox package under a held xmin: %d claims through RunBatch (batches of %d, %d connections) in chunks of %d, the purge after each; 2 generations of %d rows loaded to pass the retention during the run",
		o.xminClaims, o.batch, o.workers, o.xminChunk, o.xminGenRows), header, rows)
	return nil
}

func xminPkg(ctx context.Context, e *env, o options, l *implLayout, chunk func(rate, sizeMB, purgeS float64)) error {
	defer dropSchemas(ctx, e, l.schema)
	if err := l.openWith(ctx, e, o.workers, &inbox.Config{Retention: 2 * time.Minute}); err != nil {
		return err
	}
	defer l.pool.Close()
	var t0 time.Time
	if err := e.pool.QueryRow(ctx, "SELECT now()").Scan(&t0); err != nil {
		return err
	}
	// Rows that pass the retention (and its margin, for a generation) 1.5 and 3.5 minutes in.
	olds := []time.Time{t0.Add(-11*time.Minute - 30*time.Second), t0.Add(-9*time.Minute - 30*time.Second)}
	var jobs []loadJob
	if l.g > 0 {
		for _, at := range olds {
			g := at.Unix() / 60
			from, to := time.Unix(g*60, 0), time.Unix(g*60+60, 0)
			jobs = append(jobs, loadJob{name: fmt.Sprintf("%s gen %d", l.name, g), run: func(ctx context.Context) error {
				return l.loadGeneration(ctx, e, int32(g), o.xminGenRows, from, to)
			}})
		}
	} else {
		var sl []tslice
		for _, at := range olds {
			m := at.Truncate(time.Minute)
			sl = append(sl, tslice{o.xminGenRows, m, m.Add(time.Minute)})
		}
		jobs = append(jobs, loadJob{name: l.name, run: func(ctx context.Context) error { return l.loadTableSlices(ctx, e, sl) }})
	}
	if err := runJobs(ctx, o.loadPar, jobs); err != nil {
		return err
	}
	// The held snapshot.
	holder, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer holder.Release()
	tx, err := holder.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return err
	}
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		return err
	}
	for done := 0; done < o.xminClaims; done += o.xminChunk {
		res, err := l.run(ctx, e, o.xminChunk, o.batch, o.workers)
		if err != nil {
			return err
		}
		// The purge, cut at -xmin-purge-max (a DELETE behind a held xmin can take many minutes; a
		// cut one says so in the log, and its time is the cut).
		p0 := now()
		pctx, cancel := context.WithTimeout(ctx, o.xminPurgeMax)
		pr, err := l.ib.PurgeOlderThan(pctx, 2*time.Minute, nil)
		cut := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && !cut {
			return err
		}
		purgeS := since(p0)
		if cut {
			log.Printf("%s: the purge was cut after %.0f s", l.name, purgeS)
		}
		var mb float64
		err = e.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(c.oid) + pg_indexes_size(c.oid)), 0) / 1e6
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND (c.relname = 'processed_messages' OR c.relname LIKE 'processed\_events\_g%')`, l.schema).Scan(&mb)
		if err != nil {
			return err
		}
		log.Printf("%s: %d claims, %.0f claims/s, %.0f MB, purge %.2f s (%d rows, %d batches or generations)", l.name, done+o.xminChunk, res.rate(), mb, purgeS, pr.Deleted, pr.Batches)
		chunk(res.rate(), mb, purgeS)
	}
	return nil
}

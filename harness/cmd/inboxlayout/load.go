package main

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// Bulk loading, not through claims: each table is created and filled in one transaction (so on a
// wal_level=minimal cluster the rows skip the WAL), then indexed (a sorted build) and vacuumed.

// rowsSQL fills table with n rows shaped like the claims' (4 handlers, uuid keys, the delivery
// columns filled), with seen_at the SQL expression seen (of i, 1..n) and, for L1, gen.
func rowsSQL(table string, n int64, seen string, gen int32) string {
	genCol, genVal := "", ""
	if gen != 0 {
		genCol, genVal = "gen, ", fmt.Sprintf("%d, ", gen)
	}
	return fmt.Sprintf("INSERT INTO %s (handler, event_id, %sseen_at, source, message_id, receive_count, trace_id) "+
		"SELECT 'handler.' || (i %% %d), gen_random_uuid()::text, %s%s, 1, gen_random_uuid(), 1, uuid_send(gen_random_uuid()) "+
		"FROM generate_series(1, %d) i", table, genCol, handlers, genVal, seen, n)
}

// slice is a part of a table's rows: n rows whose seen_at is the SQL expression seen.
type slice struct {
	n    int64
	seen string
}

// seenWithin spreads seen_at over [now()-from days, now()-to days].
func seenWithin(fromDays, toDays float64) string {
	return fmt.Sprintf("now() - make_interval(secs => %f + random() * %f)", toDays*86400, (fromDays-toDays)*86400)
}

// loadJob is one independent loading task.
type loadJob struct {
	name string
	run  func(ctx context.Context) error
}

func runJobs(ctx context.Context, par int, jobs []loadJob) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(par)
	for _, j := range jobs {
		g.Go(func() error {
			start := now()
			if err := j.run(ctx); err != nil {
				return fmt.Errorf("load %s: %w", j.name, err)
			}
			log.Printf("loaded %s in %.1fs", j.name, since(start))
			return nil
		})
	}
	return g.Wait()
}

// l0Job creates l (L0) filled with the slices.
func l0Job(pool *pgxpool.Pool, l *layout, slices []slice) loadJob {
	return loadJob{name: l.name, run: func(ctx context.Context) error {
		if err := execAll(ctx, pool, "DROP SCHEMA IF EXISTS "+l.schema+" CASCADE", "CREATE SCHEMA "+l.schema,
			fmt.Sprintf(effectsDDL, l.schema)); err != nil {
			return err
		}
		if err := fillTable(ctx, pool, "CREATE TABLE "+l.table()+" ("+l0Columns()+")", l.table(), slices, 0); err != nil {
			return err
		}
		return execAll(ctx, pool,
			"ALTER TABLE "+l.table()+" ADD PRIMARY KEY (handler, event_id)",
			"CREATE INDEX processed_messages_seen_at_idx ON "+l.table()+" (seen_at)",
			"VACUUM (ANALYZE) "+l.table())
	}}
}

func fillTable(ctx context.Context, pool *pgxpool.Pool, create, table string, slices []slice, gen int32) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, create); err != nil {
		return err
	}
	for _, s := range slices {
		if _, err := tx.Exec(ctx, rowsSQL(table, s.n, s.seen, gen)); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// l1Parent creates l's schema (L1) with its parent table and no partitions.
func l1Parent(ctx context.Context, pool *pgxpool.Pool, l *layout) error {
	return execAll(ctx, pool, "DROP SCHEMA IF EXISTS "+l.schema+" CASCADE", "CREATE SCHEMA "+l.schema,
		fmt.Sprintf(effectsDDL, l.schema), l.gensDDL(),
		"CREATE TABLE "+l.table()+" ("+l1Columns()+", PRIMARY KEY (handler, event_id, gen)) PARTITION BY LIST (gen)")
}

// l1PartJob loads generation g of l (L1, parent created) with n rows and attaches it (n = 0: an
// empty partition).
func l1PartJob(pool *pgxpool.Pool, l *layout, g int32, n int64, seen string) loadJob {
	return loadJob{name: fmt.Sprintf("%s gen %d (%d rows)", l.name, g, n), run: func(ctx context.Context) error {
		if n == 0 {
			return execAll(ctx, pool, l.createPartition(g))
		}
		p := l.part(g)
		if err := fillTable(ctx, pool, "CREATE TABLE "+p+" ("+l1Columns()+")", p, []slice{{n, seen}}, g); err != nil {
			return err
		}
		// The CHECK lets ATTACH skip its validating scan; the PK index becomes the partition's
		// part of the parent's.
		return execAll(ctx, pool,
			fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (handler, event_id, gen), ADD CONSTRAINT gen_check CHECK (gen = %d)", p, g),
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%d)", l.table(), p, g),
			"VACUUM (ANALYZE) "+p)
	}}
}

// l1Jobs creates l (L1) with rows spread evenly over its live generations (and the next one empty).
func l1Jobs(ctx context.Context, pool *pgxpool.Pool, l *layout, rows int64) ([]loadJob, error) {
	if err := l1Parent(ctx, pool, l); err != nil {
		return nil, err
	}
	var jobs []loadJob
	lo, hi := l.minLive.Load(), l.cur.Load()
	per := rows / int64(hi-lo+1)
	for g := lo; g <= hi; g++ {
		age := float64(hi - g)
		jobs = append(jobs, l1PartJob(pool, l, g, per, seenWithin(age*7+7, age*7)))
	}
	jobs = append(jobs, l1PartJob(pool, l, hi+1, 0, ""))
	return jobs, nil
}

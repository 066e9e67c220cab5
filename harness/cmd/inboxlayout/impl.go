package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// implLayout is an inbox of the inbox package itself in a schema of its own: the table layout, or
// the generations or keytime layout of generation g, claimed with random (UUIDv4) keys or with
// UUIDv7 keys of the claim's time (v7).
type implLayout struct {
	name    string
	schema  string
	g       time.Duration // 0: the table layout
	keyTime bool          // the keytime layout (g > 0)
	v7      bool
	pool    *pgxpool.Pool
	ib      *inbox.Inbox
}

// stageInbox measures the inbox package's claim path, the table layout against the generations
// layout (G = 7 d and 14 d), on an empty inbox: interleaved rounds of RunBatch (batches of
// -batch, -workers at once, -events fresh events a run, each with one business insert), the
// inbox truncated and the cluster checkpointed before each run, the order rotated each round.
func stageInbox(ctx context.Context, e *env, o options) error {
	rounds := o.rounds
	if rounds == 0 {
		rounds = 10
	}
	ls := []*implLayout{
		{name: "table", schema: "impl_t"},
		{name: "generations, G = 7 d", schema: "impl_g7", g: 7 * 24 * time.Hour},
		{name: "generations, G = 14 d", schema: "impl_g14", g: 14 * 24 * time.Hour},
		{name: "table, UUIDv7 keys", schema: "impl_t7", v7: true},
		{name: "keytime, G = 14 d, UUIDv7 keys", schema: "impl_k14", g: 14 * 24 * time.Hour, keyTime: true, v7: true},
	}
	defer dropSchemas(ctx, e, "impl_t", "impl_g7", "impl_g14", "impl_t7", "impl_k14")
	for _, l := range ls {
		if err := l.open(ctx, e, o.workers); err != nil {
			return err
		}
		defer l.pool.Close()
	}
	// Warm-up: prepare the statements, fill the caches; discarded.
	for _, l := range ls {
		if _, err := l.run(ctx, e, 2000, o.batch, o.workers); err != nil {
			return err
		}
	}
	rates, cpus := make([][]float64, len(ls)), make([][]float64, len(ls))
	rateRatio, cpuRatio := make([][]float64, len(ls)), make([][]float64, len(ls))
	// Each layout against the table layout claimed with keys of the same kind (the first table
	// layout in ls with the same v7).
	rateSame, cpuSame, sameKeys := make([][]float64, len(ls)), make([][]float64, len(ls)), make([]int, len(ls))
	for i, l := range ls {
		for j, t := range ls {
			if t.g == 0 && t.v7 == l.v7 {
				sameKeys[i] = j
				break
			}
		}
	}
	for r := range rounds {
		rr, cr := make([]float64, len(ls)), make([]float64, len(ls))
		for j := range ls {
			i := (j + r) % len(ls)
			l := ls[i]
			if err := l.truncate(ctx); err != nil {
				return err
			}
			if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			res, err := l.run(ctx, e, o.events, o.batch, o.workers)
			if err != nil {
				return err
			}
			rr[i], cr[i] = res.rate(), res.cpuUS()
			log.Printf("round %d %-24s %7.0f claims/s  cpu %.0f µs/claim", r+1, l.name, res.rate(), res.cpuUS())
		}
		for i := range ls {
			ref := sameKeys[i]
			rates[i], cpus[i] = append(rates[i], rr[i]), append(cpus[i], cr[i])
			rateRatio[i], cpuRatio[i] = append(rateRatio[i], rr[i]/rr[0]), append(cpuRatio[i], cr[i]/cr[0])
			rateSame[i], cpuSame[i] = append(rateSame[i], rr[i]/rr[ref]), append(cpuSame[i], cr[i]/cr[ref])
		}
	}
	if e.pss && *dumpPSS {
		for _, l := range ls {
			if _, err := e.pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
				return err
			}
			if _, err := l.run(ctx, e, o.events, o.batch, o.workers); err != nil {
				return err
			}
			dumpStatements(ctx, e.pool, l.name)
		}
	}
	var rows [][]string
	for i, l := range ls {
		rows = append(rows, []string{l.name, spread(rates[i], "%.0f"), spread(rateRatio[i], "%.3f"), spread(cpus[i], "%.0f"), spread(cpuRatio[i], "%.3f"),
			spread(rateSame[i], "%.3f"), spread(cpuSame[i], "%.3f")})
	}
	table(fmt.Sprintf("The inbox package on an empty inbox, %d interleaved rounds (%d events a run, batches of %d, %d connections): median [min..max]; ratio = this layout / the table layout (random keys, or the same keys) in the same round",
		rounds, o.events, o.batch, o.workers), []string{"layout", "claims/s", "vs table", "server CPU µs/claim", "vs table", "claims/s vs table, same keys", "CPU vs table, same keys"}, rows)
	return nil
}

func (l *implLayout) open(ctx context.Context, e *env, workers int) error {
	return l.openWith(ctx, e, workers, &inbox.Config{})
}

// openWith is open with the inbox's config (its Schema set here).
func (l *implLayout) openWith(ctx context.Context, e *env, workers int, ibCfg *inbox.Config) error {
	if _, err := e.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+l.schema+" CASCADE"); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers + 2)
	if l.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if _, err := inbox.Migrate(ctx, l.pool, l.schema); err != nil {
		return err
	}
	if _, err := l.pool.Exec(ctx, fmt.Sprintf(effectsDDL, l.schema)); err != nil {
		return err
	}
	switch {
	case l.keyTime:
		if err := inbox.SwitchToKeyTime(ctx, l.pool, l.schema, l.g); err != nil {
			return err
		}
	case l.g > 0:
		if err := inbox.SwitchToGenerations(ctx, l.pool, l.schema, l.g); err != nil {
			return err
		}
	}
	c := *ibCfg
	c.Schema = l.schema
	if l.ib, err = inbox.New(l.pool, &c); err != nil {
		return err
	}
	return l.ib.Check(ctx)
}

func (l *implLayout) truncate(ctx context.Context) error {
	t := "processed_messages"
	if l.g > 0 {
		t = "processed_events"
	}
	_, err := l.pool.Exec(ctx, "TRUNCATE "+l.schema+"."+t+", "+l.schema+".effects")
	return err
}

// run claims events fresh events through RunBatch.
func (l *implLayout) run(ctx context.Context, e *env, events, batch, workers int) (runResult, error) {
	var res runResult
	var fresh atomic.Int64
	perWorker := events / (batch * workers)
	g, gctx := errgroup.WithContext(ctx)
	cpu0 := e.clusterCPU()
	start := now()
	for range workers {
		g.Go(func() error {
			kg := newKeygen()
			for range perWorker {
				var items []inbox.Item
				for _, it := range kg.batch(batch) {
					key := it.key
					if l.v7 {
						key = kg.v7(time.Now())
					}
					items = append(items, inbox.Item{Handler: it.handler, Key: key, Delivery: inbox.Delivery{Queue: "bench", MessageID: uuidString(it.msgID), ReceiveCount: 1},
						Fn: func(ctx context.Context, tx pgx.Tx) error {
							_, err := tx.Exec(ctx, "INSERT INTO "+l.schema+".effects (event_id, handler) VALUES ($1, $2)", key, "h")
							return err
						}})
				}
				res, _ := l.ib.RunBatch(gctx, items, nil)
				for _, r := range res {
					if r.Err != nil {
						return fmt.Errorf("%s: %w", l.name, r.Err)
					}
					if r.Outcome == inbox.Processed {
						fresh.Add(1)
					}
				}
			}
			return nil
		})
	}
	err := g.Wait()
	res.secs = since(start)
	res.cpu = e.clusterCPU() - cpu0
	res.fresh = int(fresh.Load())
	return res, err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// raceResult is what happened when claim B of a key waited on claim A's uncommitted claim of it,
// with the current generation switched between them.
type raceResult struct {
	waited time.Duration // how long B was still blocked when A ended (0: B had returned: skipped)
	bFresh int           // 1: B inserted the key (ran its effect)
	rows   int           // rows of the key over all generations
	effect int           // effects of the key
}

// holdAndRace: A claims key K in generation N and holds it uncommitted; the current generation
// moves to N+1; B claims K (it must wait); A commits (or rolls back); B ends. With the correct
// protocol B is a duplicate after A's commit and the winner after A's rollback. B claims through
// lb, which may be a variant (the one-statement negative control) of la on the same tables.
func holdAndRace(ctx context.Context, pool *pgxpool.Pool, la, lb *layout, commit bool) (raceResult, error) {
	var r raceResult
	key := uuidString(newKeygen().uuid())
	items := []item{{handler: "handler.0", key: key, trace: []byte{1}}}
	ca, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer ca.Release()
	a, err := la.claim(ctx, ca.Conn(), items)
	if err != nil {
		return r, err
	}
	if len(a.fresh) != 1 {
		return r, errors.New("the first claimer (A) did not claim a fresh key")
	}
	if err := a.work(ctx, la.schema); err != nil {
		return r, err
	}
	// The switch: B's transaction is in the next generation.
	if err := la.rotate(ctx, pool, false); err != nil {
		_ = a.tx.Rollback(ctx)
		return r, err
	}
	lb.cur.Store(la.cur.Load())
	lb.newest.Store(la.newest.Load())
	lb.minLive.Store(la.minLive.Load())
	type bres struct {
		n   int
		err error
	}
	done := make(chan bres, 1)
	go func() {
		cb, err := pool.Acquire(ctx)
		if err != nil {
			done <- bres{err: err}
			return
		}
		defer cb.Release()
		n, err := lb.runBatch(ctx, cb.Conn(), items)
		done <- bres{n, err}
	}()
	start := time.Now()
	select {
	case b := <-done:
		_ = a.tx.Rollback(ctx)
		return r, fmt.Errorf("the second claimer (B) returned while A held the key (it skipped instead of waiting): %d fresh: %w", b.n, b.err)
	case <-time.After(300 * time.Millisecond):
	}
	r.waited = time.Since(start)
	if commit {
		err = a.tx.Commit(ctx)
	} else {
		err = a.tx.Rollback(ctx)
	}
	if err != nil {
		return r, err
	}
	b := <-done
	if b.err != nil {
		return r, b.err
	}
	r.bFresh = b.n
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+la.rowsFrom()+" WHERE event_id = $1), "+
		"(SELECT count(*) FROM "+la.schema+".effects WHERE event_id = $1)", key).Scan(&r.rows, &r.effect); err != nil {
		return r, err
	}
	return r, nil
}

// rowsFrom is a FROM item over every generation of l's rows.
func (l *layout) rowsFrom() string {
	if l.kind != genTables || l.shared {
		return l.table()
	}
	var s string
	for g := l.minLive.Load(); g <= l.newest.Load(); g++ {
		if s != "" {
			s += " UNION ALL "
		}
		s += "SELECT event_id FROM " + l.part(g)
	}
	return "(" + s + ") x"
}

// stressResult counts a stress run.
type stressResult struct {
	batches, switches, keys int
	fresh                   int64
	doubles                 int // keys with more than one effect
	rowDoubles              int // keys with more than one row over the generations
	stale                   int // L2 claims retried by the guard
}

// stress: workers goroutines claim random batches of 10 out of nkeys shared keys, each holding its
// claims a moment before it commits, while the current generation moves every switchEvery.
// Every claimed key must have exactly one effect and one row.
func stress(ctx context.Context, pool *pgxpool.Pool, l *layout, workers, nkeys int, dur, switchEvery time.Duration) (stressResult, error) {
	var res stressResult
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("stress-%s-%d", uuidString(newKeygen().uuid())[:8], i)
	}
	ctx2, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var batches, fresh, stale atomic.Int64
	g, gctx := errgroup.WithContext(ctx2)
	g.Go(func() error {
		t := time.NewTicker(switchEvery)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			if err := l.rotate(context.WithoutCancel(ctx), pool, false); err != nil {
				return err
			}
			res.switches++
		}
	})
	for w := range workers {
		g.Go(func() error {
			conn, err := pool.Acquire(context.WithoutCancel(ctx))
			if err != nil {
				return err
			}
			defer conn.Release()
			r := rand.New(rand.NewPCG(uint64(w), rand.Uint64()))
			for gctx.Err() == nil {
				perm := r.Perm(nkeys)[:10]
				items := make([]item, len(perm))
				for i, p := range perm {
					items[i] = item{handler: "handler.0", key: keys[p], trace: []byte{1}}
				}
				c, err := l.claim(context.WithoutCancel(ctx), conn.Conn(), items)
				for errors.Is(err, errStale) {
					stale.Add(1)
					c, err = l.claim(context.WithoutCancel(ctx), conn.Conn(), items)
				}
				if err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				if err := c.work(context.WithoutCancel(ctx), l.schema); err != nil {
					return err
				}
				time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
				if err := c.tx.Commit(context.WithoutCancel(ctx)); err != nil {
					return err
				}
				batches.Add(1)
				fresh.Add(int64(len(c.fresh)))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.batches, res.fresh, res.stale = int(batches.Load()), fresh.Load(), int(stale.Load())
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE e > 1), count(*) FILTER (WHERE r > 1) FROM (
		SELECT k.event_id, (SELECT count(*) FROM `+l.schema+`.effects e WHERE e.event_id = k.event_id) AS e,
		(SELECT count(*) FROM `+l.rowsFrom()+` WHERE event_id = k.event_id) AS r
		FROM (SELECT DISTINCT event_id FROM `+l.schema+`.effects WHERE event_id = ANY($1)) k) z`, keys).
		Scan(&res.keys, &res.doubles, &res.rowDoubles)
	return res, err
}

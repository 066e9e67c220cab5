package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// stagePurgeAB sets the table layout's purge (the package's, through PurgeOlderThan: each batch
// walks the column's index from the last batch's value) against its two earlier statements, run
// here as SQL, in -rounds interleaved rounds: each round loads -live-rows rows within the retention
// and -forget-rows rows past it (the first number), then purges them, the order of the two
// alternating; no claims run.
func stagePurgeAB(ctx context.Context, e *env, o options) error {
	ns, err := ints64(o.forgetRows)
	if err != nil {
		return err
	}
	n := ns[0]
	rounds := o.rounds
	if rounds == 0 {
		rounds = 10
	}
	l := &implLayout{name: "table", schema: "pab_t"}
	defer dropSchemas(ctx, e, l.schema)
	if err := l.open(ctx, e, 2); err != nil {
		return err
	}
	defer l.pool.Close()
	var t0 time.Time
	if err := e.pool.QueryRow(ctx, "SELECT now()").Scan(&t0); err != nil {
		return err
	}
	load := func() error {
		return l.loadTableSlices(ctx, e, []tslice{{o.liveRows, t0.Add(-27 * 24 * time.Hour), t0.Add(-time.Minute)},
			{n, t0.Add(-43 * 24 * time.Hour), t0.Add(-29 * 24 * time.Hour)}})
	}
	// The package's statement before 891cc34 (no ORDER BY) and at it (ORDER BY, from the index's
	// start each batch), batches of 1,000, as SQL; then the package's own (PurgeOlderThan).
	sqlLoop := func(order string) func() (int64, error) {
		return func() (int64, error) {
			var deleted int64
			for {
				tag, err := l.pool.Exec(ctx, "DELETE FROM "+l.schema+".processed_messages WHERE ctid = ANY (ARRAY(SELECT ctid FROM "+
					l.schema+".processed_messages WHERE seen_at < now() - interval '28 days'"+order+" LIMIT 1000))")
				if err != nil {
					return deleted, err
				}
				deleted += tag.RowsAffected()
				if tag.RowsAffected() < 1000 {
					return deleted, nil
				}
			}
		}
	}
	variants := []struct {
		name string
		run  func() (int64, error)
	}{
		{"no ORDER BY (before 891cc34)", sqlLoop("")},
		{"ORDER BY, from the index's start each batch (891cc34)", sqlLoop(" ORDER BY seen_at")},
		{"ORDER BY, from the last batch's value (the package's)", func() (int64, error) {
			r, err := l.ib.PurgeOlderThan(ctx, inbox.DefaultRetention, nil)
			return r.Deleted, err
		}},
	}
	secs := make([][]float64, len(variants))
	ratios := make([][]float64, len(variants))
	for r := range rounds {
		s := make([]float64, len(variants))
		for j := range variants {
			i := (j + r) % len(variants)
			if err := load(); err != nil {
				return err
			}
			if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
				return err
			}
			start := now()
			d, err := variants[i].run()
			if err != nil {
				return err
			}
			if d != n {
				return fmt.Errorf("round %d, %s: purged %d rows; want %d", r+1, variants[i].name, d, n)
			}
			s[i] = since(start)
		}
		last := len(variants) - 1
		for i := range variants {
			secs[i], ratios[i] = append(secs[i], s[i]), append(ratios[i], s[i]/s[last])
		}
		log.Printf("round %d: %.2f s, %.2f s, %.2f s", r+1, s[0], s[1], s[2])
	}
	var rows [][]string
	for i, v := range variants {
		rows = append(rows, []string{v.name, spread(secs[i], "%.2f"), spread(ratios[i], "%.2f")})
	}
	table(fmt.Sprintf("The table layout's purge of %d rows past the retention beside %d within it, %d interleaved rounds (no claims running): median [min..max]",
		n, o.liveRows, rounds), []string{"statement", "seconds", "/ the package's (same round)"}, rows)
	return nil
}

package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

var db *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, "inboxlayout", &db) }

func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestWaitAcrossSwitch: a claim that waits on another's uncommitted claim of its key, across a
// generation switch, is a duplicate after that claim commits and the winner after it rolls back;
// it never skips the wait. The one-statement variant (the advisory lock and the probe in one
// statement, so the probe's snapshot is taken before the lock wait) double-applies after a commit.
func TestWaitAcrossSwitch(t *testing.T) {
	ctx := t.Context()
	pool := testPool(t)
	l1 := newLayout("L1", partitioned, "w1", 3)
	neg := newLayout("L1 one statement", partitioned, "w1", 3)
	neg.oneStatement = true
	l2 := newLayout("L2", genTables, "w2", 3)
	for _, l := range []*layout{l1, l2} {
		if err := l.createEmpty(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		a, b   *layout
		double bool // expected to double-apply after a commit
	}{{l1, l1, false}, {l2, l2, false}, {l1, neg, true}} {
		for _, commit := range []bool{true, false} {
			r, err := holdAndRace(ctx, pool, c.a, c.b, commit)
			if err != nil {
				t.Fatalf("%s commit=%v: %v", c.b.name, commit, err)
			}
			if r.waited < 300*time.Millisecond {
				t.Errorf("%s commit=%v: B did not wait", c.b.name, commit)
			}
			want := struct{ fresh, rows, effect int }{1, 1, 1}
			switch {
			case commit && c.double:
				want.rows, want.effect = 2, 2
			case commit:
				want.fresh = 0
			}
			if r.bFresh != want.fresh || r.rows != want.rows || r.effect != want.effect {
				t.Errorf("%s commit=%v: B fresh %d, rows %d, effects %d; want %+v", c.b.name, commit, r.bFresh, r.rows, r.effect, want)
			}
			t.Logf("%s, A commit=%v: B waited %v, B fresh %d, rows %d, effects %d", c.b.name, commit, r.waited, r.bFresh, r.rows, r.effect)
		}
	}
}

// TestStressSwitch: many goroutines claim batches of shared keys while the current generation
// switches every 50 ms: every key has one effect and one row. The one-statement variant's
// double-applies are logged (they depend on timing; TestWaitAcrossSwitch shows them for sure).
func TestStressSwitch(t *testing.T) {
	ctx := t.Context()
	pool := testPool(t)
	for _, l := range []*layout{
		newLayout("L0", single, "t0", 1),
		newLayout("L1", partitioned, "t1", 3),
		newLayout("L2", genTables, "t2", 3),
		func() *layout {
			l := newLayout("L1 one statement", partitioned, "t1n", 3)
			l.oneStatement = true
			return l
		}(),
	} {
		if err := l.createEmpty(ctx, pool); err != nil {
			t.Fatal(err)
		}
		r, err := stress(ctx, pool, l, 12, 100, 2*time.Second, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		t.Logf("%s: %d switches, %d batches, %d fresh claims, %d keys, %d keys with >1 effect, %d with >1 row, %d stale L2 texts retried",
			l.name, r.switches, r.batches, r.fresh, r.keys, r.doubles, r.rowDoubles, r.stale)
		if r.batches < 10 || r.keys == 0 {
			t.Errorf("%s: too little work: %+v", l.name, r)
		}
		if l.oneStatement {
			continue
		}
		if r.doubles != 0 || r.rowDoubles != 0 || r.fresh != int64(r.keys) {
			t.Errorf("%s: %+v: want one effect and one row per key", l.name, r)
		}
	}
}

// TestPackageStages (PostgreSQL): the stages that measure the inbox package run end to end on a
// small inbox (a few thousand rows, one round), so that the benchmark keeps working: the loaders
// make tables the package claims in, and its purge forgets the loaded rows in both layouts.
func TestPackageStages(t *testing.T) {
	ctx := t.Context()
	e, err := openEnv(ctx, db.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	o := options{rows: 4000, rounds: 1, events: 800, batch: 10, workers: 4, loadPar: 2,
		forgetRows: "3000", liveRows: 2000, lead: 500 * time.Millisecond, xminClaims: 1600, xminChunk: 800, xminGenRows: 2000, xminPurgeMax: time.Minute, xminLayouts: "table,generations,keytime"}
	for name, stage := range map[string]func(context.Context, *env, options) error{"inbox": stageInbox, "package": stagePackage, "pkgforget": stagePkgForget, "pkgxmin": stagePkgXmin, "purgeab": stagePurgeAB} {
		if err := stage(ctx, e, o); err != nil {
			t.Errorf("stage %s: %v", name, err)
		}
	}
}

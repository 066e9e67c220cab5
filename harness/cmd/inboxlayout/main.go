// Command inboxlayout prototypes and measures inbox layouts that forget whole generations instead
// of deleting rows, against today's single table:
//
//   - L0 "single": processed_messages as today, batched claim (RunBatch's statement), purge by
//     DELETE in batches of 1000;
//   - L1 "partitioned": PARTITION BY LIST (gen), PK (handler, event_id, gen); the claim takes a
//     transaction advisory lock per key (in hash order), then in a NEW statement (a fresh READ
//     COMMITTED snapshot, taken after the lock wait) inserts into the parent the keys that no live
//     generation holds; forgetting is DETACH PARTITION CONCURRENTLY + DROP TABLE;
//   - L2 "generation tables": one plain table per generation, probed by name with UNION ALL.
//
// Each stage is run on its own:
//
//	go run ./harness/cmd/inboxlayout -stage correctness|claims|forget|empty|xmin|inbox [-rows 50000000] [-pg URL]
//
// The stage inbox measures the inbox package itself: its table layout against its generations and
// keytime layouts (inbox.SwitchToGenerations, inbox.SwitchToKeyTime), on an empty inbox,
// interleaved; the stage package the same layouts with -rows rows loaded, against empty, and cold.
//
// Without -pg it starts a throwaway PostgreSQL cluster (harness/pgtest) with pg_stat_statements,
// wal_level=minimal (bulk loads skip the WAL) and -shared-buffers, and removes it at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"
)

type options struct {
	stage         string
	pg            string
	rows          int64
	rounds        int
	events        int
	batch         int
	workers       int
	sharedBuffers string
	forgetRows    string
	liveRows      int64
	xminClaims    int
	xminChunk     int
	xminGenRows   int64
	loadPar       int
	lead          time.Duration
	xminPurgeMax  time.Duration
	xminLayouts   string
}

func main() {
	var o options
	flag.StringVar(&o.stage, "stage", "", "correctness | claims | forget | empty | xmin | inbox (the inbox package's layouts, empty) | package (the package's layouts, loaded with -rows) | pkgforget (the package's purge of -forget-rows) | pkgxmin (the package under a held xmin) | purgeab (the table layout's purge statement, before and after)")
	flag.StringVar(&o.pg, "pg", "", "PostgreSQL URL to use (default: a throwaway cluster of its own; only that one can be restarted for cold runs)")
	flag.Int64Var(&o.rows, "rows", 50_000_000, "claims: rows preloaded in each loaded layout")
	flag.IntVar(&o.rounds, "rounds", 0, "interleaved rounds (0: 5 for claims, 10 for empty)")
	flag.IntVar(&o.events, "events", 20_000, "events claimed per run")
	flag.IntVar(&o.batch, "batch", 10, "claims per batch (transaction)")
	flag.IntVar(&o.workers, "workers", 8, "connections claiming concurrently")
	flag.StringVar(&o.sharedBuffers, "shared-buffers", "2GB", "shared_buffers of the throwaway cluster")
	flag.StringVar(&o.forgetRows, "forget-rows", "1000000,20000000", "forget: rows of the generation forgotten, comma-separated")
	flag.Int64Var(&o.liveRows, "live-rows", 1_000_000, "forget: rows in the live part of the inbox besides the ones forgotten")
	flag.IntVar(&o.xminClaims, "xmin-claims", 2_000_000, "xmin: claims per layout")
	flag.IntVar(&o.xminChunk, "xmin-chunk", 200_000, "xmin: claims per measured chunk")
	flag.Int64Var(&o.xminGenRows, "xmin-gen-rows", 2_000_000, "xmin: rows preloaded per generation (5 generations, G = 7 d)")
	flag.IntVar(&o.loadPar, "load-par", 2, "tables loaded in parallel")
	flag.StringVar(&o.xminLayouts, "xmin-layouts", "table,generations,keytime", "pkgxmin: the layouts to run, comma-separated")
	flag.DurationVar(&o.xminPurgeMax, "xmin-purge-max", time.Minute, "pkgxmin: the longest a purge may run before it is cut")
	flag.DurationVar(&o.lead, "lead", 5*time.Second, "pkgforget: claims measured before the purge starts")
	flag.Parse()
	log.SetFlags(log.Ltime)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stages := map[string]func(context.Context, *env, options) error{
		"correctness": stageCorrectness, "claims": stageClaims, "forget": stageForget, "empty": stageEmpty, "xmin": stageXmin,
		"inbox": stageInbox, "package": stagePackage, "pkgforget": stagePkgForget, "pkgxmin": stagePkgXmin, "purgeab": stagePurgeAB,
	}
	run, ok := stages[o.stage]
	if !ok {
		fmt.Fprintln(os.Stderr, "inboxlayout: -stage must be one of correctness, claims, forget, empty, xmin, inbox, package, pkgforget, pkgxmin, purgeab")
		os.Exit(2)
	}
	e, err := openEnv(ctx, o.pg, o.sharedBuffers)
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	var version string
	_ = e.pool.QueryRow(ctx, "SELECT version()").Scan(&version)
	fmt.Printf("# inboxlayout -stage %s (%s)\n%s\nargs: %s\n", o.stage, time.Now().UTC().Format(time.RFC3339), version, strings.Join(os.Args[1:], " "))
	err = run(ctx, e, o)
	e.close() // drops the throwaway cluster (or nothing on -pg; the stages drop their schemas)
	if err != nil {
		log.Fatalf("stage %s: %v", o.stage, err)
	}
	fmt.Printf("\nstage %s done in %.0fs\n", o.stage, time.Since(start).Seconds())
}

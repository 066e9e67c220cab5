package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

func runMigrate(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "migrate", "migrate up|down|status [flags]",
		"  DATABASE_URL=postgres://app@db/app sqsinbox migrate up   # the inbox's and the outbox's migrations\n"+
			"  sqsinbox migrate status --database-url postgres://app@db/app --schema sqsinbox\n"+
			"  sqsinbox migrate down --only inbox --steps 1   # revert the inbox's last migration (drops what it created)\n"+
			"  sqsinbox migrate down --all --yes              # revert every migration: drops every table of both\n\n"+
			"The schema holds two sets of migrations, each with its own version table: the inbox's\n"+
			"(schema_migrations) and the outbox's (outbox_schema_migrations). up and status cover both\n"+
			"unless --only names one. Going down needs --steps N or --all; --steps counts the\n"+
			"migrations of one set, so it also needs --only. If a table it would drop holds rows, down\n"+
			"asks on a terminal, and elsewhere refuses unless --yes is given.\n\n"+
			"--timeout also bounds each statement (as statement_timeout, or from the client behind a\n"+
			"transaction pooler): for a migration of a large table, raise it (or pass --timeout 0).")
	db.register(fs)
	steps := fs.Int("steps", 0, "for down: how many migrations of the --only set to revert, newest first (at least 1)")
	all := fs.Bool("all", false, "for down: revert every migration of both sets, or of the --only set (drops their tables)")
	yes := fs.Bool("yes", false, "for down: drop tables that hold rows without asking")
	only := fs.String("only", "", "inbox or outbox: the one set of migrations to apply, revert or list (default both)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: want exactly one of up, down or status", errUsage)
	}
	action := words[0]
	if action != "up" && action != "down" && action != "status" {
		return fmt.Errorf("%w: unknown action %q: want up, down or status", errUsage, action)
	}
	sets, err := migrationSets(*only)
	if err != nil {
		return err
	}
	stepsSet := false
	fs.Visit(func(f *flag.Flag) { stepsSet = stepsSet || f.Name == "steps" })
	if err := checkMigrateFlags(action, *only, stepsSet, *steps, *all, *yes); err != nil {
		return err
	}
	pool, err := db.connect(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch action {
	case "up":
		return migrateUp(ctx, e, pool, db.schema, sets)
	case "down":
		if *all {
			*steps = 0
		}
		return migrateDown(ctx, e, pool, db.schema, sets, *steps, *yes)
	case "status":
		return migrateStatus(ctx, e, pool, db.schema, sets)
	}
	return nil
}

// checkMigrateFlags checks that the flags fit the action: --steps, --all and --yes are down's,
// and down needs exactly one of --steps (with --only) and --all.
func checkMigrateFlags(action, only string, stepsSet bool, steps int, all, yes bool) error {
	switch {
	case action != "down" && (stepsSet || all || yes):
		return fmt.Errorf("%w: --steps, --all and --yes are for down", errUsage)
	case action != "down":
	case stepsSet && all:
		return fmt.Errorf("%w: give either --steps or --all, not both", errUsage)
	case !stepsSet && !all:
		return fmt.Errorf("%w: down needs --steps N or --all: --steps N reverts the last N migrations, --all every one (dropping every table)", errUsage)
	case stepsSet && steps < 1:
		return fmt.Errorf("%w: --steps must be at least 1 (to revert every migration, pass --all)", errUsage)
	case stepsSet && only == "":
		return fmt.Errorf("%w: --steps counts the migrations of one set: add --only inbox or --only outbox (each has its own version table)", errUsage)
	}
	return nil
}

// migrateUp is `migrate up`: it applies each set's pending migrations.
func migrateUp(ctx context.Context, e env, pool *pgxpool.Pool, schema string, sets []migrationSet) error {
	for _, set := range sets {
		v, err := set.up(ctx, pool, schema)
		if err != nil {
			return fmt.Errorf("%s: %w", set.name, err)
		}
		if len(v) == 0 {
			fmt.Fprintf(e.stdout, "schema %s: %s is up to date\n", schema, set.name)
			continue
		}
		fmt.Fprintf(e.stdout, "schema %s: %s: applied %s\n", schema, set.name, versions(v))
	}
	return nil
}

// migrateDown is `migrate down`: it reverts steps migrations of each set (0: every one), after
// confirmDown.
func migrateDown(ctx context.Context, e env, pool *pgxpool.Pool, schema string, sets []migrationSet, steps int, yes bool) error {
	// The outbox goes first: it was added after the inbox, and nothing of the inbox's
	// depends on it.
	slices.Reverse(sets)
	if err := confirmDown(ctx, e, pool, schema, sets, steps, yes); err != nil {
		return err
	}
	for _, set := range sets {
		v, err := set.down(ctx, pool, schema, steps)
		if err != nil {
			return fmt.Errorf("%s: %w", set.name, err)
		}
		fmt.Fprintf(e.stdout, "schema %s: %s: reverted %s\n", schema, set.name, versions(v))
	}
	return nil
}

// migrateStatus is `migrate status`: each set's migrations, applied when or pending.
func migrateStatus(ctx context.Context, e env, pool *pgxpool.Pool, schema string, sets []migrationSet) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SET\tVERSION\tNAME\tAPPLIED")
	for _, set := range sets {
		st, err := set.status(ctx, pool, schema)
		if err != nil {
			return fmt.Errorf("%s: %w", set.name, err)
		}
		for _, s := range st {
			at := "pending"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%04d\t%s\t%s\n", set.name, s.Version, s.Name, at)
		}
	}
	return tw.Flush()
}

// countLimit caps the rows counted in a table down would drop: enough to tell an operator
// what is at stake without scanning a huge table.
const countLimit = 1_000_000

// confirmDown finds the tables that reverting the last steps migrations (0: all) of each set
// would drop and counts their rows. If any holds rows, it asks on a terminal, or refuses unless
// yes is set.
func confirmDown(ctx context.Context, e env, pool *pgxpool.Pool, schema string, sets []migrationSet, steps int, yes bool) error {
	var (
		reverted []string
		holding  []string // "schema.table (n rows)"
	)
	for _, set := range sets {
		st, err := set.status(ctx, pool, schema)
		if err != nil {
			return fmt.Errorf("%s: %w", set.name, err)
		}
		var v []int
		for _, s := range slices.Backward(st) {
			if s.AppliedAt.IsZero() {
				continue
			}
			if steps > 0 && len(v) == steps {
				break
			}
			v = append(v, s.Version)
			for _, t := range s.Drops {
				n, err := countRows(ctx, pool, schema, t)
				if err != nil {
					return err
				}
				if n > 0 {
					holding = append(holding, fmt.Sprintf("%s.%s (%s)", schema, t, rowsText(n)))
				}
			}
		}
		if len(v) > 0 {
			reverted = append(reverted, set.name+" "+versions(v))
		}
	}
	if len(holding) == 0 || yes {
		return nil
	}
	what := fmt.Sprintf("reverting %s drops %s", strings.Join(reverted, " and "), strings.Join(holding, ", "))
	if !e.terminal {
		return fmt.Errorf("%w: %s: pass --yes to confirm (there is no terminal to ask on)", errUsage, what)
	}
	fmt.Fprintf(e.stderr, "In schema %s, %s, with their rows.\nType yes to go on: ", schema, what)
	answer, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("not confirmed: nothing reverted")
	}
	return nil
}

// countRows counts the rows of schema.table, up to countLimit + 1; a missing table has none.
func countRows(ctx context.Context, pool *pgxpool.Pool, schema, table string) (int64, error) {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", sqlident.Quote(schema, table)).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	err := pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT FROM "+sqlident.Quote(schema, table)+" LIMIT $1) t", countLimit+1).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the rows of %s.%s: %w", schema, table, err)
	}
	return n, nil
}

func rowsText(n int64) string {
	if n > countLimit {
		return fmt.Sprintf("over %d rows", countLimit)
	}
	return plural(int(n), "row")
}

func versions(v []int) string {
	if len(v) == 0 {
		return "nothing"
	}
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprintf("%04d", n)
	}
	return strings.Join(parts, ", ") + " (" + plural(len(v), "migration") + ")"
}

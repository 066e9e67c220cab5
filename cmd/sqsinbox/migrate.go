package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

func runMigrate(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "migrate", "migrate [flags] up|down|status",
		"  DATABASE_URL=postgres://app@db/app sqsinbox migrate up\n"+
			"  sqsinbox migrate --database-url postgres://app@db/app --schema sqsinbox status\n"+
			"  sqsinbox migrate --steps 1 down    # revert the last migration (drops what it created)")
	db.register(fs)
	steps := fs.Int("steps", 0, "for down: how many migrations to revert (0 means all)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: want exactly one of up, down or status", errUsage)
	}
	action := fs.Arg(0)
	if action != "up" && action != "down" && action != "status" {
		return fmt.Errorf("%w: unknown action %q: want up, down or status", errUsage, action)
	}
	pool, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch action {
	case "up":
		v, err := inbox.Migrate(ctx, pool, db.schema)
		if err != nil {
			return err
		}
		if len(v) == 0 {
			fmt.Fprintf(e.stdout, "schema %s is up to date\n", db.schema)
			return nil
		}
		fmt.Fprintf(e.stdout, "schema %s: applied %s\n", db.schema, versions(v))
	case "down":
		v, err := inbox.MigrateDown(ctx, pool, db.schema, *steps)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "schema %s: reverted %s\n", db.schema, versions(v))
	case "status":
		st, err := inbox.Migrations(ctx, pool, db.schema)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
		for _, s := range st {
			at := "pending"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%04d\t%s\t%s\n", s.Version, s.Name, at)
		}
		return tw.Flush()
	}
	return nil
}

func versions(v []int) string {
	if len(v) == 0 {
		return "nothing"
	}
	s := ""
	for i, n := range v {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%04d", n)
	}
	return s + " (" + strconv.Itoa(len(v)) + " migrations)"
}

package main

import (
	"context"
	"fmt"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

func runInbox(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "inbox", "inbox layout [generations|keytime --generation 14d --yes]",
		"  sqsinbox inbox layout                                   # the inbox's layout\n"+
			"  sqsinbox inbox layout generations --generation 14d --yes # switch the inbox to generations\n"+
			"  sqsinbox inbox layout keytime --generation 14d --yes     # to generations, routed by the keys' time\n\n"+
			"The table layout (the default) keeps the rows in processed_messages and forgets them with\n"+
			"DELETE: cheap while the inbox is small. The generations layout keeps them in processed_events,\n"+
			"partitioned into generations of --generation, and forgets a whole generation at a time\n"+
			"(a DROP, at the same cost at any size), for inboxes of hundreds of millions of rows and more;\n"+
			"each claim then costs a little more. The switch locks processed_messages for a moment\n"+
			"(waiting up to 10 s for running claims) and keeps its rows as processed_messages_legacy,\n"+
			"which every claim probes until the purge has deleted them all (after the retention) and\n"+
			"dropped it: no redelivery goes uncaught. Switch once every worker of the schema runs this\n"+
			"version or later: an older binary's claims fail (it pauses as a broken deployment).\n\n"+
			"The keytime layout is the generations layout for events whose keys carry their time (UUIDv7\n"+
			"or ULID): each such key's row goes to the generation of its time, so its claim is one insert,\n"+
			"as cheap as the table layout's at any size. Other keys are claimed as in generations. A key\n"+
			"whose time is more than 5 minutes and at most the retention and a day ahead of the worker's\n"+
			"clock is refused until it is not; one further ahead is claimed as a key without a time.\n"+
			"An inbox already in generations cannot switch to keytime.")
	db.register(fs)
	gen := fs.String("generation", "14d", "the generation length, for the switch: whole seconds from 1m to 90d")
	yes := fs.Bool("yes", false, "for the switch: do it (without it, say what it would do)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := sqlident.Validate("--schema", db.schema); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case len(words) == 1 && words[0] == "layout":
	case len(words) == 2 && words[0] == "layout" && (words[1] == inbox.LayoutGenerations || words[1] == inbox.LayoutKeyTime):
	default:
		fs.Usage()
		return fmt.Errorf("%w: want layout, layout generations or layout keytime", errUsage)
	}
	ib, closeDB, err := db.openInbox(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	if len(words) == 2 {
		g, err := parseAge(*gen)
		if err != nil {
			return err
		}
		if !*yes {
			fmt.Fprintf(e.stdout, "would switch %s to the %s layout, generations of %s; pass --yes\n", db.schema, words[1], durationText(g))
			return nil
		}
		switchTo := inbox.SwitchToGenerations
		if words[1] == inbox.LayoutKeyTime {
			switchTo = inbox.SwitchToKeyTime
		}
		if err := switchTo(ctx, ib.Pool(), db.schema, g); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "switched %s to the %s layout, generations of %s\n", db.schema, words[1], durationText(g))
	}
	kind, g, err := ib.Layout(ctx)
	if err != nil {
		return err
	}
	if kind != inbox.LayoutTable {
		probes := int((ib.Retention()+g-1)/g) + 1
		legacy := ""
		if ib.LegacyRows() {
			legacy = "; the rows from before the switch are in processed_messages_legacy until the purge has forgotten them"
		}
		if kind == inbox.LayoutKeyTime {
			fmt.Fprintf(e.stdout, "%s: keytime, generations of %s (a key that carries its time is one insert into its time's generation; another probes %d generations, with retention %s)%s\n",
				db.schema, durationText(g), probes, durationText(ib.Retention()), legacy)
			return nil
		}
		fmt.Fprintf(e.stdout, "%s: generations of %s (a claim probes %d of them, with retention %s)%s\n", db.schema, durationText(g), probes, durationText(ib.Retention()), legacy)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: table (processed_messages, forgotten by DELETE)\n", db.schema)
	return nil
}

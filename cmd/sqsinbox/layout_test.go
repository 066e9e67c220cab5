package main

import (
	"strings"
	"testing"
)

// TestInboxLayout (PostgreSQL): `inbox layout` shows the table layout of a migrated schema;
// `inbox layout generations` says what it would do without --yes, switches with it, and refuses
// a second time; afterwards stats, events show and purge work on processed_events, and reverting
// the migration that records the layout is refused.
func TestInboxLayout(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_layout")
	schema := dbArgs[len(dbArgs)-1]
	if r := cli(t, "", append([]string{"inbox", "layout"}, dbArgs...)...).mustOK(t); !strings.Contains(r.stdout, schema+": table") {
		t.Errorf("layout: %s", r.stdout)
	}
	if r := cli(t, "", append([]string{"inbox", "layout", "generations", "--generation", "1h"}, dbArgs...)...).mustOK(t); !strings.Contains(r.stdout, "would switch "+schema+" to the generations layout, generations of 1h0m0s; pass --yes") {
		t.Errorf("without --yes: %s", r.stdout)
	}
	r := cli(t, "", append([]string{"inbox", "layout", "generations", "--generation", "1d", "--yes"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "switched "+schema+" to the generations layout, generations of 1d") || !strings.Contains(r.stdout, schema+": generations of 1d") {
		t.Errorf("switch: %s", r.stdout)
	}
	if r := cli(t, "", append([]string{"inbox", "layout", "generations", "--yes"}, dbArgs...)...); r.code == 0 || !strings.Contains(r.stderr, "in the generations layout already") {
		t.Errorf("a second switch: exit %d, %s", r.code, r.stderr)
	}
	if r := cli(t, "", append([]string{"inbox", "layout", "generations", "--generation", "5s", "--yes"}, dbArgs...)...); r.code == 0 || !strings.Contains(r.stderr, "want whole seconds from 1m0s") {
		t.Errorf("a bad generation: exit %d, %s", r.code, r.stderr)
	}
	cli(t, "", append([]string{"stats", "--no-age"}, dbArgs...)...).mustOK(t)
	cli(t, "", append([]string{"events", "show", "evt_none"}, dbArgs...)...).mustFail(t, 3, "event evt_none: not processed by any handler")
	cli(t, "", append([]string{"purge", "--skip-queue-check", "--skip-keys", "--skip-outbox"}, dbArgs...)...).mustOK(t)
	revertInboxAbove(t, pool, dbArgs, 6)
	if r := cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", "2", "--yes"}, dbArgs...)...); r.code == 0 || !strings.Contains(r.stderr, "generations layout") {
		t.Errorf("reverting 0006 and 0005 in the generations layout: exit %d, %s", r.code, r.stderr)
	}

	// An inbox with rows keeps them in processed_messages_legacy, and says so.
	pool, dbArgs2 := migratedSchema(t, "cli_layout_rows")
	schema2 := dbArgs2[len(dbArgs2)-1]
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema2+`.processed_messages (handler, event_id) VALUES ('warehouse', 'evt_9f3k')`); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", append([]string{"inbox", "layout", "generations", "--yes"}, dbArgs2...)...).mustOK(t)
	if !strings.Contains(r.stdout, "generations of 14d") || !strings.Contains(r.stdout, "processed_messages_legacy until the purge has forgotten them") {
		t.Errorf("switch with rows: %s", r.stdout)
	}
	if r := cli(t, "", append([]string{"events", "show", "evt_9f3k"}, dbArgs2...)...).mustOK(t); !strings.Contains(r.stdout, "warehouse") {
		t.Errorf("events show of a legacy row: %s", r.stdout)
	}
}

// TestInboxLayoutKeyTime (PostgreSQL): `inbox layout keytime` switches a schema to the keytime
// layout and says how it claims; a second switch, to either layout, is refused; stats and purge
// work; reverting the migration that allows the layout is refused while the schema is in it.
func TestInboxLayoutKeyTime(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_layout_kt")
	schema := dbArgs[len(dbArgs)-1]
	r := cli(t, "", append([]string{"inbox", "layout", "keytime", "--generation", "1d", "--yes"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "switched "+schema+" to the keytime layout, generations of 1d") || !strings.Contains(r.stdout, schema+": keytime, generations of 1d (a key that carries its time is one insert") {
		t.Errorf("switch: %s", r.stdout)
	}
	for _, to := range []string{"generations", "keytime"} {
		if r := cli(t, "", append([]string{"inbox", "layout", to, "--yes"}, dbArgs...)...); r.code == 0 || !strings.Contains(r.stderr, "in the keytime layout already") {
			t.Errorf("a second switch, to %s: exit %d, %s", to, r.code, r.stderr)
		}
	}
	cli(t, "", append([]string{"stats", "--no-age"}, dbArgs...)...).mustOK(t)
	cli(t, "", append([]string{"purge", "--skip-queue-check", "--skip-keys", "--skip-outbox"}, dbArgs...)...).mustOK(t)
	revertInboxAbove(t, pool, dbArgs, 6)
	if r := cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", "1", "--yes"}, dbArgs...)...); r.code == 0 || !strings.Contains(r.stderr, "keytime layout") {
		t.Errorf("reverting 0006 in the keytime layout: exit %d, %s", r.code, r.stderr)
	}
	if r := cli(t, "", append([]string{"inbox", "layout", "tables"}, dbArgs...)...); r.code != 2 || !strings.Contains(r.stderr, "want layout, layout generations or layout keytime") {
		t.Errorf("a bad word: exit %d, %s", r.code, r.stderr)
	}
}

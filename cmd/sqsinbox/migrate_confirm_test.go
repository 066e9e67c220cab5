package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestMigrateDownAsksOnATerminal runs down as if stdin and stderr were a terminal: only "y" or
// "yes" drops a table that holds rows.
func TestMigrateDownAsksOnATerminal(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_ask")
	schema := dbArgs[len(dbArgs)-1]
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ('h', 'e1')`); err != nil {
		t.Fatal(err)
	}
	ask := func(answer string) result {
		var out, errb bytes.Buffer
		e := env{stdin: strings.NewReader(answer), stdout: &out, stderr: &errb, terminal: true}
		code := runEnv(t.Context(), e, append([]string{"migrate", "down", "--all"}, dbArgs...))
		return result{code, out.String(), errb.String()}
	}
	for _, answer := range []string{"n\n", "", "yes please\n"} {
		r := ask(answer)
		if r.code != 1 || !strings.Contains(r.stderr, schema+".processed_messages (1 row)") ||
			!strings.Contains(lastLine(r.stderr), "not confirmed: nothing reverted") {
			t.Fatalf("answer %q: exit %d\nstderr %s", answer, r.code, r.stderr)
		}
		if got := tablesOf(t, pool, schema); got != allTables {
			t.Fatalf("answer %q: tables left %q, want %q", answer, got, allTables)
		}
	}
	r := ask("Yes\n")
	if r.code != 0 || !strings.Contains(r.stdout, allReverted(t, pool, schema)) {
		t.Fatalf("answer yes: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if got := tablesOf(t, pool, schema); got != "outbox_schema_migrations,schema_migrations" {
		t.Fatalf("tables after a confirmed down: %q", got)
	}
}

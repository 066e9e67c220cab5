package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestEventsShowAndList (PostgreSQL): show names every handler that processed a key and when, or
// says none did and exits 3; list pages a handler's events, oldest first, with --since, and --json gives
// scripts the rows and the next cursor; bad input is refused with a usage error.
func TestEventsShowAndList(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_ev")
	schema := dbArgs[len(dbArgs)-1]
	// 30 events for warehouse, one a day back from now; evt_9f3k for loyalty too.
	_, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id, seen_at)
		SELECT 'warehouse', 'e' || lpad(g::text, 2, '0'), now() - make_interval(days => g) FROM generate_series(1, 30) g
		UNION ALL SELECT h, 'evt_9f3k', now() FROM unnest(ARRAY['warehouse', 'loyalty']) h`)
	if err != nil {
		t.Fatal(err)
	}
	events := func(args ...string) result {
		return cli(t, "", append(append([]string{"events"}, args...), dbArgs...)...)
	}

	r := events("show", "evt_9f3k").mustOK(t)
	if !strings.Contains(r.stdout, "loyalty") || !strings.Contains(r.stdout, "warehouse") || strings.Count(r.stdout, "evt_9f3k") != 2 {
		t.Errorf("show evt_9f3k:\n%s", r.stdout)
	}
	// Not processed: exit 3, for scripts, with the reason on stderr.
	events("show", "evt_never").mustFail(t, 3, "event evt_never: not processed by any handler", "0 failures recorded")
	events("show", "evt_9f3k", "--handler", "billing").mustFail(t, 3, "not processed by handler billing")
	events("show", "evt_never", "--json").mustFail(t, 3, "event evt_never: not processed")
	var shown struct {
		EventID     string `json:"event_id"`
		ProcessedBy []struct {
			Handler string `json:"handler"`
		} `json:"processed_by"`
	}
	r = events("show", "evt_9f3k", "--json").mustOK(t)
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.ProcessedBy) != 2 || shown.ProcessedBy[0].Handler != "loyalty" {
		t.Errorf("show --json: %v\n%s", err, r.stdout)
	}

	// One event: said in the singular.
	r = events("list", "--handler", "loyalty").mustOK(t)
	if !strings.Contains(r.stdout, "evt_9f3k") || !strings.Contains(r.stdout, "\n1 event; the last page\n") {
		t.Errorf("list --handler loyalty:\n%s", r.stdout)
	}

	// The 10 days before now: e01..e10 (e10 is 10 days old, within the --since of 10d 1h).
	r = events("list", "--handler", "warehouse", "--since", "241h", "--limit", "4").mustOK(t)
	if !strings.Contains(r.stdout, "e10") || !strings.Contains(r.stdout, "e07") || strings.Contains(r.stdout, "e06") ||
		!strings.Contains(r.stdout, "4 events; next page: --after ") {
		t.Fatalf("list, first page:\n%s", r.stdout)
	}
	var page struct {
		Events []struct {
			EventID string `json:"event_id"`
		} `json:"events"`
		Next string `json:"next"`
	}
	seen, after := 0, ""
	for range 5 {
		args := []string{"list", "--handler", "warehouse", "--since", "241h", "--limit", "4", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		r = events(args...).mustOK(t)
		if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
			t.Fatalf("list --json: %v\n%s", err, r.stdout)
		}
		seen += len(page.Events)
		if after = page.Next; after == "" {
			break
		}
	}
	if seen != 11 { // e01..e10 and evt_9f3k
		t.Errorf("paged through %d events since 241h ago; want 11", seen)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "list needs --handler"},
		{[]string{"show"}, "show takes one event key"},
		{[]string{"list", "--handler", "warehouse", "--since", "yesterday"}, `--since "yesterday": want an RFC 3339 time`},
		{[]string{"list", "--handler", "warehouse", "--after", "not-a-cursor"}, "the cursor is not one List returned"},
		{[]string{"list", "--handler", "warehouse", "--limit", "0"}, "--limit 0: want 1 to 10000"},
		{[]string{"purge"}, `unknown action "purge": want show or list`},
	} {
		events(tc.args...).mustFail(t, 2, tc.want)
	}
}

// TestEventsShowFailures (PostgreSQL): show lists the recorded failures of an event under its
// processed rows (newest first, each error cut to its first line), filters them with --handler,
// gives them whole in --json, and exits 3 for an event that only failed.
func TestEventsShowFailures(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_evf")
	schema := dbArgs[len(dbArgs)-1]
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Instance: "task-7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ('loyalty', 'evt_9f3k')`); err != nil {
		t.Fatal(err)
	}
	err = ib.RecordFailures(t.Context(), []inbox.Failure{
		{Handler: "warehouse", EventID: "evt_9f3k", MessageID: "6f1c8a52-0000-4000-8000-000000000001", Queue: "orders", ReceiveCount: 1, Error: "handler panicked: out of boxes\ngoroutine 7 [running]:"},
		{Handler: "loyalty", EventID: "evt_9f3k", MessageID: "6f1c8a52-0000-4000-8000-000000000001", Queue: "orders", ReceiveCount: 1, Error: "points service: 503"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.RecordFailures(t.Context(), []inbox.Failure{{Handler: "warehouse", EventID: "evt_9f3k", MessageID: "6f1c8a52-0000-4000-8000-000000000001", Queue: "orders", ReceiveCount: 2, Error: "out of boxes again"}}); err != nil {
		t.Fatal(err)
	}
	events := func(args ...string) result {
		return cli(t, "", append(append([]string{"events"}, args...), dbArgs...)...)
	}
	r := events("show", "evt_9f3k").mustOK(t)
	again, panicked := strings.Index(r.stdout, "out of boxes again"), strings.Index(r.stdout, "handler panicked: out of boxes …")
	if !strings.Contains(r.stdout, "3 failures, the newest first") || again < 0 || panicked < again || strings.Contains(r.stdout, "goroutine") ||
		!strings.Contains(r.stdout, "points service: 503") || !strings.Contains(r.stdout, "task-7") || !strings.Contains(r.stdout, "orders") {
		t.Errorf("show:\n%s", r.stdout)
	}
	// warehouse never applied it: exit 3, and its two failures are shown.
	r = events("show", "evt_9f3k", "--handler", "warehouse")
	r.mustFail(t, 3, "not processed by handler warehouse", "2 failures recorded")
	if !strings.Contains(r.stdout, "out of boxes again") || strings.Contains(r.stdout, "points service") {
		t.Errorf("show --handler warehouse:\n%s", r.stdout)
	}
	var shown struct {
		Failures []inbox.Failure `json:"failures"`
	}
	r = events("show", "evt_9f3k", "--json").mustOK(t)
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.Failures) != 3 ||
		!strings.Contains(shown.Failures[2].Error, "goroutine 7") || shown.Failures[0].ReceiveCount != 2 {
		t.Errorf("show --json: %v\n%s", err, r.stdout)
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEventsShowAndList (PostgreSQL): show names every handler that processed a key and when, or
// says none did; list pages a handler's events, oldest first, with --since, and --json gives
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
	r = events("show", "evt_never").mustOK(t)
	if !strings.Contains(r.stdout, "event evt_never: not processed by any handler") {
		t.Errorf("show of a key never processed:\n%s", r.stdout)
	}
	r = events("show", "evt_9f3k", "--handler", "billing").mustOK(t)
	if !strings.Contains(r.stdout, "not processed by handler billing") {
		t.Errorf("show --handler billing:\n%s", r.stdout)
	}
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

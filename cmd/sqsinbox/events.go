package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

func runEvents(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "events", "events show KEY | events list --handler H [flags]",
		"  sqsinbox events show evt_9f3k                       # which handlers applied it, and when\n"+
			"  sqsinbox events list --handler warehouse --since 2026-12-01T00:00:00Z --limit 50\n"+
			"  sqsinbox events list --handler warehouse --after CURSOR --json   # the next page, for scripts\n\n"+
			"show prints every handler whose effect of the event committed, with the time of its claim,\n"+
			"and the handlers' recorded failures of it (the last 5 per handler: time, message, receive\n"+
			"count, instance, error). It exits 3 when no handler processed the event (or its rows were\n"+
			"purged, past the inbox's retention), 0 when one did.\n"+
			"list pages through one handler's events, the oldest first; the last line gives the cursor\n"+
			"of the next page. --json prints one JSON object (events, next).")
	db.register(fs)
	handler := fs.String("handler", "", "for list (required): the handler whose events to list; for show: only this handler")
	since := fs.String("since", "", "for list: events seen at or after this time (RFC 3339, or an age such as 2h or 7d)")
	until := fs.String("until", "", "for list: events seen before this time (RFC 3339, or an age)")
	limit := fs.Int("limit", 100, "for list: the most events per page (1 to 10000)")
	after := fs.String("after", "", "for list: the cursor a previous page ended with")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: want show KEY or list --handler H", errUsage)
	}
	if err := sqlident.Validate("--schema", db.schema); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var run func(ib *inbox.Inbox) error
	switch words[0] {
	case "show":
		if len(words) != 2 {
			return fmt.Errorf("%w: show takes one event key", errUsage)
		}
		key := words[1]
		if err := inbox.ValidateKey(key); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		run = func(ib *inbox.Inbox) error { return showEvent(ctx, e, ib, key, *handler, *asJSON) }
	case "list":
		if len(words) != 1 {
			return fmt.Errorf("%w: list takes no argument, got %q", errUsage, words[1])
		}
		if *handler == "" {
			return fmt.Errorf("%w: list needs --handler", errUsage)
		}
		o := inbox.ListOptions{Handler: *handler, Limit: *limit, After: *after}
		if o.Since, err = timeFlag("--since", *since); err != nil {
			return err
		}
		if o.Until, err = timeFlag("--until", *until); err != nil {
			return err
		}
		if *limit < 1 || *limit > 10000 {
			return fmt.Errorf("%w: --limit %d: want 1 to 10000", errUsage, *limit)
		}
		run = func(ib *inbox.Inbox) error { return listEvents(ctx, e, ib, o, *asJSON) }
	default:
		return fmt.Errorf("%w: unknown action %q: want show or list", errUsage, words[0])
	}
	ib, closeDB, err := db.openInbox(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	return db.inboxError(run(ib))
}

// timeFlag reads a time given as RFC 3339 or as an age before now ("2h", "7d").
func timeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := parseAge(v); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s %q: want an RFC 3339 time (2026-12-01T00:00:00Z) or an age (90m, 2h, 7d)", errUsage, name, v)
}

// errNotProcessed marks `events show` of an event no handler processed: it exits 3, so that a
// script can tell "not applied" (3) from "applied" (0) and from an error (1, 2).
var errNotProcessed = errors.New("not processed")

// maxErrorShown is how much of a failure's error text `events show` prints in its table, in
// characters (--json prints all that was recorded).
const maxErrorShown = 160

func showEvent(ctx context.Context, e env, ib *inbox.Inbox, key, handler string, asJSON bool) error {
	found, err := ib.Lookup(ctx, key)
	if err != nil {
		return err
	}
	failures, err := ib.Failures(ctx, []string{key}, nil)
	if err != nil {
		return err
	}
	if handler != "" {
		found = slices.DeleteFunc(found, func(p inbox.ProcessedEvent) bool { return p.Handler != handler })
		failures = slices.DeleteFunc(failures, func(f inbox.Failure) bool { return f.Handler != handler })
	}
	who := "any handler"
	if handler != "" {
		who = "handler " + handler
	}
	notProcessed := fmt.Errorf("%w: event %s: not processed by %s (or its rows were purged, past the inbox's retention); %s recorded",
		errNotProcessed, key, who, plural(len(failures), "failure"))
	if asJSON {
		if found == nil {
			found = []inbox.ProcessedEvent{}
		}
		if failures == nil {
			failures = []inbox.Failure{}
		}
		if err := json.NewEncoder(e.stdout).Encode(map[string]any{"event_id": key, "processed_by": found, "failures": failures}); err != nil {
			return err
		}
		if len(found) == 0 {
			return notProcessed
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(found) > 0 {
		fmt.Fprintf(tw, "HANDLER\tEVENT\tSEEN AT\tQUEUE\tMESSAGE\tRECEIVE\tINSTANCE\tTRACE\n")
		for _, p := range found {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Handler, p.EventID, p.SeenAt.UTC().Format(time.RFC3339Nano), deliveryCells(p))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(failures) > 0 {
		if len(found) > 0 {
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintf(e.stdout, "%s, the newest first (the last %d per handler are kept; --json for the whole text):\n", plural(len(failures), "failure"), inbox.FailuresKept)
		writeFailures(e.stdout, failures)
	}
	if len(found) == 0 {
		return notProcessed
	}
	return nil
}

// writeFailures prints failure records as a table, each error cut to its first line and
// maxErrorShown characters.
func writeFailures(w io.Writer, fs []inbox.Failure) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  HANDLER\tFAILED AT\tQUEUE\tMESSAGE\tRECEIVE\tINSTANCE\tERROR\n")
	for _, f := range fs {
		count := "-"
		if f.ReceiveCount > 0 {
			count = strconv.Itoa(f.ReceiveCount)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Handler, f.FailedAt.UTC().Format(time.RFC3339Nano), cmp.Or(f.Queue, "-"),
			f.MessageID, count, cmp.Or(f.Instance, "-"), shortError(f.Error))
	}
	_ = tw.Flush()
}

// shortError is the first line of an error text, at most maxErrorShown characters.
func shortError(s string) string {
	l := firstLine(s)
	if r := []rune(l); len(r) > maxErrorShown {
		l = string(r[:maxErrorShown]) + "…"
	}
	if l != s && !strings.HasSuffix(l, "…") {
		l += " …"
	}
	return l
}

func listEvents(ctx context.Context, e env, ib *inbox.Inbox, o inbox.ListOptions, asJSON bool) error {
	page, next, err := ib.List(ctx, o)
	if errors.Is(err, inbox.ErrBadCursor) {
		return fmt.Errorf("%w: --after: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		if page == nil {
			page = []inbox.ProcessedEvent{}
		}
		return json.NewEncoder(e.stdout).Encode(map[string]any{"events": page, "next": next})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "EVENT\tSEEN AT\tQUEUE\tMESSAGE\tRECEIVE\tINSTANCE\tTRACE\n")
	for _, p := range page {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.EventID, p.SeenAt.UTC().Format(time.RFC3339Nano), deliveryCells(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case next != "":
		fmt.Fprintf(e.stdout, "%s; next page: --after %s\n", plural(len(page), "event"), next)
	default:
		fmt.Fprintf(e.stdout, "%s; the last page\n", plural(len(page), "event"))
	}
	return nil
}

// deliveryCells are the columns of where an event came from, "-" where the row has none.
func deliveryCells(p inbox.ProcessedEvent) string {
	count := "-"
	if p.ReceiveCount > 0 {
		count = strconv.Itoa(p.ReceiveCount)
	}
	return strings.Join([]string{cmp.Or(p.Queue, "-"), cmp.Or(p.MessageID, "-"), count, cmp.Or(p.Instance, "-"), cmp.Or(p.TraceID, "-")}, "\t")
}

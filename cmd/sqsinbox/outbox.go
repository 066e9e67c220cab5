package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/outbox"
)

func runOutbox(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "outbox", "outbox list-parked|retry [--all | ID...]|show EVENT_ID [flags]",
		"  sqsinbox outbox list-parked                 # the parked messages, newest first, with their last error\n"+
			"  sqsinbox outbox show evt_9f3k               # the event's rows: where to, added and published when, attempts\n"+
			"  sqsinbox outbox retry 41 42 --schema app    # re-queue two parked messages\n"+
			"  sqsinbox outbox retry --all                 # re-queue every parked message\n\n"+
			"The relay parks a message after RelayConfig.MaxAttempts failed publishes; it stays in\n"+
			"outbox_messages, unsent, until it is re-queued, and on a FIFO destination it holds back\n"+
			"the rest of its group. retry resets its attempts, so the relay publishes it again at once.")
	db.register(fs)
	all := fs.Bool("all", false, "for retry: re-queue every parked message")
	limit := fs.Int("limit", 50, "for list-parked: the most messages to list, newest parked first")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: want list-parked, retry or show", errUsage)
	}
	action, rest := words[0], words[1:]
	limitSet := false
	fs.Visit(func(f *flag.Flag) { limitSet = limitSet || f.Name == "limit" })
	ids, err := checkOutboxArgs(action, rest, *all, *limit, limitSet)
	if err != nil {
		return err
	}
	pool, err := db.connect(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer pool.Close()
	ob, err := openOutbox(ctx, pool, db.schema)
	if err != nil {
		return err
	}
	if action == "show" {
		return showOutboxEvent(ctx, e, pool, db.schema, rest[0])
	}
	if action == "list-parked" {
		return listParkedCmd(ctx, e, ob, pool, db.schema, *limit)
	}
	return retryParkedCmd(ctx, e, ob, pool, db.schema, ids)
}

// checkOutboxArgs checks the action's words and flags, and returns retry's message ids (none for
// --all or another action).
func checkOutboxArgs(action string, rest []string, all bool, limit int, limitSet bool) ([]int64, error) {
	switch action {
	case "show":
		if len(rest) != 1 || all || limitSet {
			return nil, fmt.Errorf("%w: show takes one event id and no --all or --limit", errUsage)
		}
	case "list-parked":
		switch {
		case len(rest) > 0:
			return nil, fmt.Errorf("%w: list-parked takes no argument, got %q", errUsage, rest[0])
		case all:
			return nil, fmt.Errorf("%w: --all is for retry", errUsage)
		case limit < 1:
			return nil, fmt.Errorf("%w: --limit must be at least 1", errUsage)
		}
	case "retry":
		if limitSet {
			return nil, fmt.Errorf("%w: --limit is for list-parked", errUsage)
		}
		return retryIDs(rest, all)
	default:
		return nil, fmt.Errorf("%w: unknown action %q: want list-parked, retry or show", errUsage, action)
	}
	return nil, nil
}

// retryIDs are retry's message ids, each once: the words, or none with --all.
func retryIDs(words []string, all bool) ([]int64, error) {
	var ids []int64
	for _, w := range words {
		id, err := strconv.ParseInt(w, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%w: %q is not a message id (a positive number, the ID column of `sqsinbox outbox list-parked`)", errUsage, w)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	switch {
	case all && len(ids) > 0:
		return nil, fmt.Errorf("%w: give either --all or message ids, not both", errUsage)
	case !all && len(ids) == 0:
		return nil, fmt.Errorf("%w: retry needs the ids of the messages to re-queue, or --all for every parked one", errUsage)
	}
	return ids, nil
}

// listParkedCmd is `outbox list-parked`: the parked messages, the last parked first, up to limit.
func listParkedCmd(ctx context.Context, e env, ob *outbox.Outbox, pool *pgxpool.Pool, schema string, limit int) error {
	st, err := ob.Stats(ctx)
	if err != nil {
		return err
	}
	rows, err := listParked(ctx, pool, schema, limit)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(e.stdout, "schema %s: no parked outbox messages\n", schema)
		return nil
	}
	if err := printParked(e.stdout, rows); err != nil {
		return err
	}
	if int64(len(rows)) < st.Parked {
		fmt.Fprintf(e.stdout, "(%d of %s shown: raise --limit for more)\n", len(rows), plural(int(st.Parked), "parked message"))
	}
	return nil
}

// retryParkedCmd is `outbox retry`: it re-queues the parked messages ids (none: every parked
// one), and names the ids given that are not parked.
func retryParkedCmd(ctx context.Context, e env, ob *outbox.Outbox, pool *pgxpool.Pool, schema string, ids []int64) error {
	// Which of the ids given are parked, so that the others are named rather than silently skipped.
	var notParked []int64
	if len(ids) > 0 {
		var parked []int64
		err := pool.QueryRow(ctx, "SELECT coalesce(array_agg(id), '{}') FROM "+sqlident.Quote(schema, "outbox_messages")+
			" WHERE id = ANY($1) AND parked_at IS NOT NULL AND sent_at IS NULL", ids).Scan(&parked)
		if err != nil {
			return fmt.Errorf("%s.outbox_messages: %w", schema, err)
		}
		for _, id := range ids {
			if !slices.Contains(parked, id) {
				notParked = append(notParked, id)
			}
		}
	}
	n, err := ob.RetryParked(ctx, ids...)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schema %s: outbox: re-queued %s\n", schema, plural(int(n), "parked message"))
	if len(notParked) > 0 {
		s := make([]string, len(notParked))
		for i, id := range notParked {
			s[i] = strconv.FormatInt(id, 10)
		}
		return fmt.Errorf("not re-queued: %s %s not parked in %s.outbox_messages (no such id, already sent, or not failing)",
			strings.Join(s, ", "), map[bool]string{true: "is", false: "are"}[len(s) == 1], schema)
	}
	return nil
}

// errOutboxNotMigrated is openOutbox's error for a schema without the outbox's migrations.
var errOutboxNotMigrated = errors.New("outbox not migrated")

// openOutbox returns the outbox of schema, checked to be migrated.
func openOutbox(ctx context.Context, pool *pgxpool.Pool, schema string) (*outbox.Outbox, error) {
	ob, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := ob.Check(ctx); err != nil {
		if errors.Is(err, migrate.ErrBehind) {
			return nil, fmt.Errorf("%w: the outbox is not migrated in schema %s (%s.%s lacks its migrations): run `sqsinbox migrate up`",
				errOutboxNotMigrated, schema, schema, outbox.VersionTable)
		}
		return nil, err
	}
	return ob, nil
}

// parkedRow is a message the relay gave up on.
type parkedRow struct {
	id          int64
	eventID     string
	destination string
	attempts    int
	parkedAt    time.Time
	lastError   string
}

// listParked returns up to limit parked messages of schema's outbox, the newest parked first.
func listParked(ctx context.Context, pool *pgxpool.Pool, schema string, limit int) ([]parkedRow, error) {
	rows, err := pool.Query(ctx, "SELECT id, event_id, destination, attempts, parked_at, coalesce(last_error, '') FROM "+
		sqlident.Quote(schema, "outbox_messages")+
		" WHERE parked_at IS NOT NULL AND sent_at IS NULL ORDER BY parked_at DESC, id DESC LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("%s.outbox_messages: %w", schema, err)
	}
	defer rows.Close()
	var out []parkedRow
	for rows.Next() {
		var r parkedRow
		if err := rows.Scan(&r.id, &r.eventID, &r.destination, &r.attempts, &r.parkedAt, &r.lastError); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s.outbox_messages: %w", schema, err)
	}
	return out, nil
}

// showOutboxEvent prints the outbox's rows of an event, one per destination: when it was added,
// published or parked, its attempts and last error. It probes the (destination, event_id) index
// once per destination, not the table.
func showOutboxEvent(ctx context.Context, e env, pool *pgxpool.Pool, schema, eventID string) error {
	t := sqlident.Quote(schema, "outbox_messages")
	rows, err := pool.Query(ctx, `WITH RECURSIVE d(name) AS (
  (SELECT destination FROM `+t+` ORDER BY destination LIMIT 1)
  UNION ALL
  SELECT (SELECT destination FROM `+t+` WHERE destination > d.name ORDER BY destination LIMIT 1) FROM d WHERE d.name IS NOT NULL
)
SELECT m.id, m.destination, m.created_at, m.sent_at, m.parked_at, m.attempts, coalesce(m.last_error, '')
FROM d JOIN `+t+` m ON m.destination = d.name AND m.event_id = $1 ORDER BY m.id`, eventID)
	if err != nil {
		return fmt.Errorf("%s.outbox_messages: %w", schema, err)
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID	DESTINATION	ADDED	STATE	ATTEMPTS	LAST ERROR")
	n := 0
	for rows.Next() {
		var (
			id            int64
			dest, lastErr string
			added         time.Time
			sent, parked  *time.Time
			attempts      int
		)
		if err := rows.Scan(&id, &dest, &added, &sent, &parked, &attempts, &lastErr); err != nil {
			return err
		}
		state := "unsent"
		switch {
		case sent != nil:
			state = "published " + sent.UTC().Format(time.RFC3339)
		case parked != nil:
			state = "parked " + parked.UTC().Format(time.RFC3339)
		}
		if lastErr != "" {
			lastErr = errorText(lastErr)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", id, dest, added.UTC().Format(time.RFC3339), state, attempts, lastErr)
		n++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s.outbox_messages: %w", schema, err)
	}
	if n == 0 {
		fmt.Fprintf(e.stdout, "event %s: not in %s.outbox_messages (never added, or sent and purged)\n", eventID, schema)
		return nil
	}
	return tw.Flush()
}

// maxErrorText is how much of a parked message's last error a listing shows.
const maxErrorText = 200

func printParked(w io.Writer, rows []parkedRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENT\tDESTINATION\tATTEMPTS\tPARKED AT\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", r.id, r.eventID, r.destination, r.attempts,
			r.parkedAt.UTC().Format(time.RFC3339), errorText(r.lastError))
	}
	return tw.Flush()
}

// errorText keeps a stored error to one line of at most maxErrorText characters.
func errorText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(none recorded)"
	}
	if r := []rune(s); len(r) > maxErrorText {
		return string(r[:maxErrorText-1]) + "…"
	}
	return s
}

// outboxStats prints the outbox's backlog, its oldest age and its parked messages (the last
// parked of them, with their errors). A schema without the outbox is one line, not an error.
func outboxStats(ctx context.Context, e env, pool *pgxpool.Pool, schema string, parked int) error {
	ob, err := openOutbox(ctx, pool, schema)
	if errors.Is(err, errOutboxNotMigrated) {
		fmt.Fprintf(e.stdout, "\noutbox: not migrated in schema %s (a service that uses it runs `sqsinbox migrate up`)\n", schema)
		return nil
	}
	if err != nil {
		return err
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		return err
	}
	oldest := "none"
	if st.Backlog > 0 {
		oldest = ageText(st.OldestUnsent)
	}
	fmt.Fprintf(e.stdout, "\noutbox: %s unsent (oldest %s), %s\n", plural(int(st.Backlog), "message"), oldest,
		plural(int(st.Parked), "parked message"))
	if st.Parked == 0 || parked == 0 {
		return nil
	}
	rows, err := listParked(ctx, pool, schema, parked)
	if err != nil {
		return err
	}
	if err := printParked(e.stdout, rows); err != nil {
		return err
	}
	if int64(len(rows)) < st.Parked {
		fmt.Fprintf(e.stdout, "(the last %d of %d parked: `sqsinbox outbox list-parked` lists more; `sqsinbox outbox retry` re-queues)\n", len(rows), st.Parked)
	} else {
		fmt.Fprintln(e.stdout, "(`sqsinbox outbox retry --all` or `retry ID...` re-queues them)")
	}
	return nil
}

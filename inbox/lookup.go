package inbox

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// ProcessedEvent is one row of the inbox: handler Handler applied event EventID, and its transaction
// committed at about SeenAt (the database's clock when the claim was made). The rest is the
// claim's [Delivery] and the instance that made it; each is empty where the claim did not record
// it (a row written before migration 0004, or a caller that passed no Delivery).
type ProcessedEvent struct {
	Handler      string    `json:"handler"`
	EventID      string    `json:"event_id"`
	SeenAt       time.Time `json:"seen_at"`
	MessageID    string    `json:"message_id,omitempty"`
	Queue        string    `json:"queue,omitempty"`
	Instance     string    `json:"instance,omitempty"`
	ReceiveCount int       `json:"receive_count,omitempty"`
	TraceID      string    `json:"trace_id,omitempty"`
}

// eventColumns reads a ProcessedEvent from processed_messages p left-joined to inbox_sources src.
const eventColumns = "p.handler, p.event_id, p.seen_at, p.message_id, src.queue, src.instance, p.receive_count, p.trace_id"

func scanEvents(rows pgx.Rows) ([]ProcessedEvent, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProcessedEvent, error) {
		var (
			e               ProcessedEvent
			id              pgtype.UUID
			queue, instance pgtype.Text
			count           pgtype.Int2
			trace           []byte
		)
		err := row.Scan(&e.Handler, &e.EventID, &e.SeenAt, &id, &queue, &instance, &count, &trace)
		e.MessageID, e.Queue, e.Instance, e.ReceiveCount = formatUUID(id), queue.String, instance.String, int(count.Int16)
		if trace != nil {
			e.TraceID = hex.EncodeToString(trace)
		}
		return e, err
	})
}

// Lookup returns every handler that has processed the event with key key, by handler name; none
// (and no error) when no handler has, or when the rows are older than the retention and were
// purged. It reads the primary key once per handler name in the table (found by a skip scan of
// the key's index, not a scan of the table), so it stays cheap however many rows there are.
func (ib *Inbox) Lookup(ctx context.Context, key string) ([]ProcessedEvent, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var out []ProcessedEvent
	err := ib.readRows(ctx, func(l *genLayout) error {
		var err error
		out, err = ib.lookup(ctx, ib.rowsOf(l), key)
		return err
	})
	if err != nil {
		return nil, lookupError(ib.cfg.Schema, err)
	}
	return out, nil
}

// lookup is Lookup's read of t, the table of the inbox's rows.
func (ib *Inbox) lookup(ctx context.Context, t, key string) ([]ProcessedEvent, error) {
	// The handler names, each found by one index probe past the last (a loose index scan), and
	// the event's row under each (one: in the keytime layout a late claim records its key twice,
	// at once, and the two rows say the same).
	q := `WITH RECURSIVE h(name) AS (
  (SELECT handler FROM ` + t + ` ORDER BY handler LIMIT 1)
  UNION ALL
  SELECT (SELECT handler FROM ` + t + ` WHERE handler > h.name ORDER BY handler LIMIT 1) FROM h WHERE h.name IS NOT NULL
)
SELECT DISTINCT ON (p.handler) ` + eventColumns + ` FROM h JOIN ` + t + ` p ON p.handler = h.name AND p.event_id = $1
LEFT JOIN ` + sqlident.Quote(ib.cfg.Schema, "inbox_sources") + ` src ON src.id = p.source ORDER BY p.handler`
	rows, err := ib.pool.Query(ctx, q, key)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// ListOptions selects the rows [Inbox.List] returns.
type ListOptions struct {
	// Handler is the handler whose rows to list. Required.
	Handler string
	// Since and Until bound SeenAt: Since <= SeenAt < Until. Zero means unbounded.
	Since, Until time.Time
	// Limit is the most rows returned. 0 means 100; at most 10,000.
	Limit int
	// After is the cursor a previous List returned, to read the next page; "" starts at the
	// oldest row.
	After string
}

// List returns one page of handler's rows, the oldest first (by SeenAt, then EventID), and the
// cursor of the next page ("" after the last). Rows committed while an operator pages through
// may appear on a later page or not at all.
func (ib *Inbox) List(ctx context.Context, o ListOptions) ([]ProcessedEvent, string, error) {
	if err := ValidateHandler(o.Handler); err != nil {
		return nil, "", err
	}
	limit := o.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 10000:
		return nil, "", fmt.Errorf("inbox: list: ListOptions.Limit is %d; want 1 to 10000 (0 means 100)", limit)
	}
	var (
		afterAt *time.Time
		afterID string
	)
	if o.After != "" {
		c, err := decodeCursor(o.After)
		if err != nil {
			return nil, "", err
		}
		afterAt, afterID = &c.At, c.ID
	}
	since, until := nullTime(o.Since), nullTime(o.Until)
	var out []ProcessedEvent
	err := ib.readRows(ctx, func(l *genLayout) error {
		q := `SELECT ` + eventColumns + ` FROM ` + ib.rowsOf(l) + ` p
LEFT JOIN ` + sqlident.Quote(ib.cfg.Schema, "inbox_sources") + ` src ON src.id = p.source
WHERE p.handler = $1 AND ($2::timestamptz IS NULL OR p.seen_at >= $2) AND ($3::timestamptz IS NULL OR p.seen_at < $3)
  AND ($4::timestamptz IS NULL OR (p.seen_at, p.event_id) > ($4, $5))
ORDER BY p.seen_at, p.event_id LIMIT $6`
		rows, err := ib.pool.Query(ctx, q, o.Handler, since, until, afterAt, afterID, limit+1)
		if err != nil {
			return err
		}
		out, err = scanEvents(rows)
		return err
	})
	if err != nil {
		return nil, "", lookupError(ib.cfg.Schema, err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, encodeCursor(cursor{At: last.SeenAt, ID: last.EventID}), nil
}

// cursor is where a page of List ended.
type cursor struct {
	At time.Time `json:"t"`
	ID string    `json:"e"`
}

// ErrBadCursor is returned by List for an After it did not make.
var ErrBadCursor = errors.New("inbox: list: the cursor is not one List returned")

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.At.IsZero() {
		return c, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return c, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func lookupError(schema string, err error) error {
	if errors.Is(statsError(schema, err), ErrNotMigrated) {
		return statsError(schema, err)
	}
	return fmt.Errorf("inbox: lookup: %w", err)
}

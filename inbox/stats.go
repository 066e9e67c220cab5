package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// ErrNotMigrated is wrapped by [Inbox.Stats] when the schema has no inbox table: run [Migrate]
// (`sqsinbox migrate up`) first.
var ErrNotMigrated = errors.New("inbox: the schema is not migrated")

// HandlerStats is what the inbox remembers for one handler.
type HandlerStats struct {
	// Handler is the handler's name.
	Handler string
	// Rows is the number of events it has processed that the inbox still remembers.
	Rows int64
	// Oldest and Newest are the times of its oldest and newest rows (the database's clock).
	Oldest, Newest time.Time
}

// Stats is a snapshot of the inbox, for operators.
type Stats struct {
	// Handlers lists each handler's rows, by name.
	Handlers []HandlerStats
	// Now is the database's clock when the snapshot was taken.
	Now time.Time
	// PurgeHorizon is Now less the retention: [Inbox.Purge] deletes the rows older than this.
	PurgeHorizon time.Time
}

// Stats reads how many rows each handler has, their ages, and the purge horizon, in one
// statement. It scans the table: run it from an operator's tool, not per message.
func (ib *Inbox) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	if err := ib.pool.QueryRow(ctx, "SELECT now()").Scan(&st.Now); err != nil {
		return st, fmt.Errorf("inbox: stats: %w", err)
	}
	st.PurgeHorizon = st.Now.Add(-ib.cfg.Retention)
	err := ib.readRows(ctx, func(l *genLayout) error {
		q := ib.sql.stats
		if l != nil {
			q = l.stats
		}
		rows, err := ib.pool.Query(ctx, q)
		if err != nil {
			return err
		}
		st.Handlers, err = pgx.AppendRows([]HandlerStats(nil), rows, func(row pgx.CollectableRow) (HandlerStats, error) {
			var h HandlerStats
			err := row.Scan(&h.Handler, &h.Rows, &h.Oldest, &h.Newest)
			return h, err
		})
		return err
	})
	if err != nil {
		return st, statsError(ib.cfg.Schema, err)
	}
	return st, nil
}

func statsError(schema string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // undefined table, schema
		return fmt.Errorf("%w: schema %q has no processed_messages table; run `sqsinbox migrate up` (or inbox.Migrate): %w", ErrNotMigrated, schema, err)
	}
	return fmt.Errorf("inbox: stats: %w", err)
}

// Oldest returns the database's clock and the time of the inbox's oldest row (zero when it has
// none): what a purge that keeps up holds within the retention. Unlike [Inbox.Stats] it scans
// nothing, so a deployment check can run it on a large inbox: in the table layout it reads the
// seen_at index; in the generations layouts the catalog, where the oldest generation table's
// start bounds its rows' age (the purge drops a generation whole), and the legacy table's index
// while it is there.
func (ib *Inbox) Oldest(ctx context.Context) (oldest, now time.Time, err error) {
	err = ib.readRows(ctx, func(l *genLayout) error {
		var seen *time.Time
		if l == nil {
			if err := ib.pool.QueryRow(ctx, "SELECT min(seen_at), now() FROM "+ib.rowsOf(nil)).Scan(&seen, &now); err != nil {
				return err
			}
			if seen != nil {
				oldest = *seen
			}
			return nil
		}
		conn, err := ib.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if err := conn.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return err
		}
		parts, err := ib.listGenerations(ctx, conn.Conn())
		if err != nil {
			return err
		}
		for g, p := range parts {
			if t := time.Unix(int64(g)*int64(l.g/time.Second), 0); p.attached && (oldest.IsZero() || t.Before(oldest)) {
				oldest = t
			}
		}
		if l.legacy {
			if err := conn.QueryRow(ctx, "SELECT min(seen_at) FROM "+sqlident.Quote(ib.cfg.Schema, "processed_messages_legacy")).Scan(&seen); err != nil {
				return err
			}
		}
		if seen != nil && (oldest.IsZero() || seen.Before(oldest)) {
			oldest = *seen
		}
		return nil
	})
	if err != nil {
		return time.Time{}, time.Time{}, statsError(ib.cfg.Schema, err)
	}
	return oldest, now, nil
}

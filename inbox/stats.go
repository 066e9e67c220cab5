package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

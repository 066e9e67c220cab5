package workerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// DefaultDatabaseWait is how long a program waits at start for a database that cannot be reached
// (DATABASE_WAIT): long enough for a failover of RDS or Aurora (tens of seconds) or a restart of
// PostgreSQL, short enough that a wrong host in DATABASE_URL is reported within minutes.
const DefaultDatabaseWait = 5 * time.Minute

// The pace of the attempts while the program waits for its database: growing from
// waitBackoffMin to waitBackoffMax, so that the program starts within waitBackoffMax of the
// database's return.
const (
	waitBackoffMin = 250 * time.Millisecond
	waitBackoffMax = 2 * time.Second
)

// databaseWait reads DATABASE_WAIT: a Go duration ("90s", "5m"); "0" does not wait. Unset means
// [DefaultDatabaseWait].
func databaseWait(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv("DATABASE_WAIT"))
	if v == "" {
		return DefaultDatabaseWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("DATABASE_WAIT=%q: want a duration such as 90s or 5m (0 does not wait)", v)
	}
	return d, nil
}

// dbWait is a program's wait for its database at start: each step that needs the database
// (connecting, the worker's start-up checks) is tried again while the database cannot be
// reached, until limit has passed since the first attempt. It logs the wait once when it begins
// and once when it ends, and the health checks say "waiting" meanwhile (/livez up, /readyz down).
type dbWait struct {
	limit  time.Duration
	log    *slog.Logger
	health *healthSwitch // nil for `migrate`
	begun  time.Time     // the first attempt
	since  time.Time     // when the current wait began, or zero
	tries  int
}

func newDBWait(getenv func(string) string, log *slog.Logger, health *healthSwitch) (*dbWait, error) {
	limit, err := databaseWait(getenv)
	if err != nil {
		return nil, err
	}
	return &dbWait{limit: limit, log: log, health: health, begun: time.Now()}, nil
}

// do calls step until it succeeds, fails for a reason other than an unreachable database, the
// wait's limit has passed, or ctx ends. what names the step in the logs.
func (w *dbWait) do(ctx context.Context, what string, step func(context.Context) error) error {
	for {
		err := step(ctx)
		if err == nil {
			if !w.since.IsZero() {
				w.log.Info("the database is reachable; starting", "step", what, "waited", time.Since(w.since).Round(time.Millisecond), "attempts", w.tries)
				w.since, w.tries = time.Time{}, 0
				w.health.waiting(false)
			}
			return nil
		}
		if ctx.Err() != nil || !databaseDown(err) {
			return err
		}
		waited := time.Since(w.begun)
		if waited >= w.limit {
			return fmt.Errorf("%w (waited %v for the database; DATABASE_WAIT=%v)", err, waited.Round(time.Second), w.limit)
		}
		w.tries++
		if w.since.IsZero() {
			w.since = time.Now()
			w.health.waiting(true)
			w.log.Warn("the database cannot be reached; waiting for it (DATABASE_WAIT)", "step", what, "limit", w.limit, "error", err)
		} else {
			w.log.Debug("the database still cannot be reached", "step", what, "attempts", w.tries, "error", err)
		}
		d := min(waitBackoffMin<<min(w.tries-1, 10), waitBackoffMax)
		d = d/2 + rand.N(d/2+1) // jitter: replicas started together do not try in step
		t := time.NewTimer(min(d, max(w.limit-waited, time.Millisecond)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the database: %w (last error: %w)", ctx.Err(), err)
		}
	}
}

// databaseDown reports whether err says the database cannot be reached now but may be soon: no
// connection could be made or a connection broke (a restart, a failover, a network fault), or
// the server is starting up, shutting down or out of connections. A refusal that waiting does
// not cure (a wrong password, an unknown database, a missing table) is not.
func databaseDown(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
			"53300": // too_many_connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, inbox.ErrConnectionLost) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
}

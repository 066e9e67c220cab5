package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
)

// ErrPoolerQueryMode is wrapped by the error of [Inbox.Check] when the pool reaches PostgreSQL
// through a transaction pooler (PgBouncer in transaction mode, RDS Proxy) in a pgx query mode
// that fails there: cache_statement (pgx's default) or describe_exec, whose prepared statements
// are used on a server connection other than the one that prepared them. Check tells a pooler
// by opening two connections of its own and comparing their server sessions; it does so only
// when the pool's mode is one of those two. The error names the fix: default_query_exec_mode=
// cache_describe in the URL (workerapp sets it itself when the URL sets no mode), or exec or
// simple_protocol.
var ErrPoolerQueryMode = pooler.ErrQueryMode

// ErrAsyncCommit is returned by [Inbox.CheckDurability] when the server's synchronous_commit is
// off and Config.AcceptAsyncCommit is false.
var ErrAsyncCommit = errors.New("inbox: synchronous_commit is off: a commit can vanish after its message was deleted, " +
	"which loses the message; set synchronous_commit = on, or set Config.AcceptAsyncCommit to accept the risk")

// CheckDurability reads synchronous_commit on a connection of the pool and returns
// [ErrAsyncCommit] if it is off, unless Config.AcceptAsyncCommit is set.
func (ib *Inbox) CheckDurability(ctx context.Context) error {
	var v string
	if err := ib.pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&v); err != nil {
		return fmt.Errorf("inbox: read synchronous_commit: %w", err)
	}
	if v == "off" && !ib.cfg.AcceptAsyncCommit {
		return ErrAsyncCommit
	}
	return nil
}

// RetentionError is returned by [Inbox.CheckRetention] when the inbox would forget an event
// while it can still be redelivered.
type RetentionError struct {
	Retention time.Duration // the inbox's
	Horizon   time.Duration // the longest redelivery delay upstream
}

func (e *RetentionError) Error() string {
	return fmt.Sprintf("inbox: retention %v is shorter than the redelivery horizon %v: "+
		"a message redelivered after its inbox row was purged would be processed twice; raise inbox Config.Retention to at least %v",
		e.Retention, e.Horizon, e.Horizon)
}

// CheckRetention fails with a *[RetentionError] if the retention is shorter than horizon, the
// longest time upstream can redeliver an event. For SQS that is the queue's
// MessageRetentionPeriod (and the DLQ's, if messages are redriven).
func (ib *Inbox) CheckRetention(horizon time.Duration) error {
	if ib.cfg.Retention < horizon {
		return &RetentionError{Retention: ib.cfg.Retention, Horizon: horizon}
	}
	return nil
}

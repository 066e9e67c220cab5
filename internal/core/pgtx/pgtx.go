// Package pgtx holds the transaction mechanics that the inbox and the HTTP middleware share:
// telling a COMMIT that did not happen from one whose outcome is unknown, and telling a failure of
// the transaction's own connection from a failure of the work done on it.
package pgtx

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CommitUnknown reports whether err, returned by COMMIT, leaves the outcome unknown: the
// connection failed during the COMMIT, so the transaction may or may not have committed. A
// refusal from the server (a *pgconn.PgError, such as a serialization failure) or pgx's "commit
// unexpectedly resulted in rollback" says it did not commit.
func CommitUnknown(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !errors.Is(err, pgx.ErrTxCommitRollback)
}

// ConnLost reports whether tx's connection is gone: never had (the pool could not connect) or
// closed (pgx closes a connection it cannot use any more). It is decided from the connection's
// state, not from an error's type.
func ConnLost(tx pgx.Tx) bool {
	c := tx.Conn()
	return c == nil || c.PgConn() == nil || c.PgConn().IsClosed()
}

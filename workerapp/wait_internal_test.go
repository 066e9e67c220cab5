package workerapp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestDatabaseDown: the errors a start-up waits out (the database cannot be reached, is
// starting, stopping or full) and those it reports at once (a refusal that waiting does not cure).
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name string
		err  error
		down bool
	}{
		{"connection refused", &dbError{msg: "unreachable", err: dial}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"shutting down", fmt.Errorf("worker: start-up check: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"connection lost in the inbox", fmt.Errorf("x: %w", inbox.ErrConnectionLost), true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", pgconn.ErrConnClosed, true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"unknown database", &pgconn.PgError{Code: "3D000"}, false},
		{"missing table", fmt.Errorf("inbox: %w", &pgconn.PgError{Code: "42P01"}), false},
		{"unknown role", &pgconn.PgError{Code: "28000"}, false},
		{"anything else", errors.New("queue not found"), false},
	} {
		if got := databaseDown(tc.err); got != tc.down {
			t.Errorf("%s: databaseDown(%v) = %v, want %v", tc.name, tc.err, got, tc.down)
		}
	}
}

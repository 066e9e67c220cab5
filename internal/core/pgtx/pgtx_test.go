package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

func TestCommitUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "40P01"}), false},
		{pgx.ErrTxCommitRollback, false},
		{io.ErrUnexpectedEOF, true},
		{context.DeadlineExceeded, true},
		{errors.New("write: broken pipe"), true},
	} {
		if got := pgtx.CommitUnknown(tc.err); got != tc.want {
			t.Errorf("CommitUnknown(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

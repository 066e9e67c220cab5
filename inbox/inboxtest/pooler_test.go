package inboxtest_test

import (
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
)

// TestBehindTransactionPooler (PostgreSQL behind Debian's PgBouncer 1.18 in transaction mode,
// harness/pgbouncer): the fixture's search_path is a session setting that a transaction pooler
// cannot keep, and PgBouncer refuses it at connecting. New fails the test saying so and what to
// point it at, instead of with the pooler's bare protocol error.
func TestBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	b := pgbouncer.Busy(t, server, nil, 0)
	msg := newFails(t, inboxtest.WithDatabaseURL(b.URL))
	for _, want := range []string{"refused the pool's search_path", "unsupported startup parameter: search_path",
		"transaction pooler", "PostgreSQL itself or at a session-mode pooler"} {
		if !strings.Contains(msg, want) {
			t.Errorf("New failed with %q, want a message with %q", msg, want)
		}
	}
}

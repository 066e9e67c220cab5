package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// TestMisbehaviourOf: the rule gives each class its share of keys (2 %, 1 %, 1 %, 1 %), the same
// class to the same key every time, and only the three failing classes fail. The 600 events of
// TestFault11BatchMisbehavingHandlers hold at least 5 of each.
func TestMisbehaviourOf(t *testing.T) {
	t.Parallel()
	want := map[reliability.Misbehaviour]float64{
		reliability.SwallowsError: 0.02, reliability.LeavesRowsOpen: 0.01, reliability.OverrunsTimeout: 0.01, reliability.CommitsItself: 0.01,
	}
	const n = 50000
	got := map[reliability.Misbehaviour]int{}
	for _, ev := range reliability.GoodEvents("mis", n) {
		m := reliability.MisbehaviourOf(ev.Key)
		if again := reliability.MisbehaviourOf(ev.Key); again != m {
			t.Fatalf("key %s: %s, then %s", ev.Key, m, again)
		}
		got[m]++
	}
	for m, share := range want {
		if f := float64(got[m]) / n; f < share*0.85 || f > share*1.15 {
			t.Errorf("%s: %.2f %% of %d keys, want %.0f %%", m, 100*f, n, 100*share)
		}
	}
	small := map[reliability.Misbehaviour]int{}
	for _, ev := range reliability.GoodEvents("mis", 600) {
		small[reliability.MisbehaviourOf(ev.Key)]++
	}
	for _, m := range reliability.Misbehaviours {
		if small[m] < 5 {
			t.Errorf("600 events hold %d of class %s, want at least 5", small[m], m)
		}
		fails := m == reliability.SwallowsError || m == reliability.LeavesRowsOpen || m == reliability.OverrunsTimeout
		if m.Fails() != fails {
			t.Errorf("%s.Fails() = %v", m, m.Fails())
		}
	}
}

// TestResultKind names the results the misbehaving handlers' check tells apart.
func TestResultKind(t *testing.T) {
	t.Parallel()
	pgErr := &pgconn.PgError{Code: "22012", Message: "division by zero"}
	tests := []struct {
		err  error
		want string
	}{
		{nil, reliability.ResultDone},
		{worker.ErrDuplicate, reliability.ResultDuplicate},
		{&inbox.TxAbortedError{Err: pgErr}, reliability.ResultTxAborted + " 22012"},
		{&inbox.TxAbortedError{}, reliability.ResultTxAborted},
		{fmt.Errorf("%w (1 left open; closed by the inbox)", inbox.ErrRowsOpen), reliability.ResultRowsOpen},
		{fmt.Errorf("%w: %w", worker.ErrHandlerTimeout, inbox.ErrTimeout), reliability.ResultTimeout},
		{fmt.Errorf("%w: reliability: overran the timeout: timeout: context deadline exceeded", worker.ErrHandlerTimeout), reliability.ResultTimeout},
		{context.Canceled, reliability.ResultCanceled},
		{inbox.ErrItemRolledBack, reliability.ResultRolledBack},
		{worker.Unavailable(inbox.ErrConnectionLost), reliability.ResultUnavailable},
		{worker.Unavailable(inbox.ErrCommitUnknown), reliability.ResultUnknown},
		{worker.RetryBlocked(time.Second, inbox.ErrClaimBlocked), reliability.ResultBlocked},
		{worker.BrokenDeployment(&inbox.DeploymentError{Err: &pgconn.PgError{Code: "42P01"}}), reliability.ResultBroken},
		{fmt.Errorf("%w: %w", worker.ErrNotRun, inbox.ErrTwinNotProcessed), reliability.ResultNotRun},
		{errors.New("boom"), reliability.ResultError},
	}
	for _, tt := range tests {
		if got := reliability.ResultKind(tt.err); got != tt.want {
			t.Errorf("ResultKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// cutter cuts the connection at the next COMMITs its pool's connections send: before the server
// gets the COMMIT, or after the server has answered it (so the transaction did commit), the
// client seeing a broken connection either way: a COMMIT whose outcome is unknown.
type cutter struct {
	after atomic.Bool  // cut after the server answered, rather than before it got the COMMIT
	left  atomic.Int32 // COMMITs still to cut
}

type cutConn struct {
	net.Conn
	c      *cutter
	doomed atomic.Bool
}

func (c *cutConn) Write(b []byte) (int, error) {
	if len(b) > 0 && b[0] == 'Q' && bytes.Contains(bytes.ToLower(b), []byte("commit")) && c.c.left.Add(-1) >= 0 {
		if !c.c.after.Load() {
			_ = c.Close()
			return 0, errors.New("cut before the COMMIT")
		}
		c.doomed.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.doomed.Load() {
		_ = c.Close() // the answer arrived: the COMMIT happened; the client never sees it
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// cutPool is a pool whose connections go through c.
func cutPool(t *testing.T, c *cutter) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, c: c}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestCommitUnknownSettledInProcess (PostgreSQL, through a connection wrapper that cuts COMMITs):
// a COMMIT whose outcome is unknown is settled by claiming again, on both paths: if it happened,
// the claims find the rows (duplicates); if not, the work runs again (processed). Either way one
// effect per event, and no error, so the message can be deleted without a redelivery. When the
// COMMITs of three attempts are cut (only runs whose COMMITs did not happen commit again), the
// error wraps ErrCommitUnknown (nothing may be acknowledged).
func TestCommitUnknownSettledInProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		after bool
		cuts  int32
		want  string // the outcome of each event; "unknown" for ErrCommitUnknown
	}{
		{after: true, cuts: 1, want: "duplicate"},
		{after: false, cuts: 1, want: "processed"},
		{after: true, cuts: 3, want: "duplicate"}, // the second claim commits nothing to cut
		{after: false, cuts: 2, want: "processed"},
		{after: false, cuts: 3, want: "unknown"},
	} {
		t.Run(fmt.Sprintf("after=%v/cuts=%d", tc.after, tc.cuts), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			c := &cutter{}
			c.after.Store(tc.after)
			ib, err := inbox.New(cutPool(t, c), &inbox.Config{Schema: b.schema})
			if err != nil {
				t.Fatal(err)
			}
			name := func(out inbox.Outcome, err error) string {
				switch {
				case errors.Is(err, inbox.ErrCommitUnknown):
					return "unknown"
				case err != nil:
					return err.Error()
				}
				return out.String()
			}
			c.left.Store(tc.cuts)
			if got := name(ib.Run(t.Context(), "run", "e", b.record(nil))); got != tc.want {
				t.Errorf("Run: %s, want %s", got, tc.want)
			}
			c.left.Store(tc.cuts)
			res, st := ib.RunBatch(t.Context(), []inbox.Item{{Handler: "batch", Key: "a", Fn: b.record(nil)},
				{Handler: "batch", Key: "b", Fn: b.record(nil)}}, nil)
			for i, r := range res {
				if got := name(r.Outcome, r.Err); got != tc.want {
					t.Errorf("RunBatch item %d: %s, want %s (stats %+v)", i, got, tc.want, st)
				}
			}
			want := 1 // the first COMMIT happened, or the second run committed
			if tc.want == "unknown" {
				want = 0 // no COMMIT reached the server
			}
			for _, e := range []struct{ handler, key string }{{"run", "e"}, {"batch", "a"}, {"batch", "b"}} {
				if got := b.effects(t, e.handler, e.key); got != want {
					t.Errorf("%s/%s: %d effects, want %d", e.handler, e.key, got, want)
				}
			}
		})
	}
}

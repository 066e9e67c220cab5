package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// Traffic is other clients' short statements on the pooler: what makes a transaction pooler hand a
// client's next statement to another server connection. One client alone usually gets the same
// server connection back, which hides session state that a busy pooler would split.
type Traffic struct {
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	statements atomic.Int64
	mu         sync.Mutex
	err        error
}

// StartTraffic starts clients connections through the pooler, each running `SELECT 1` in a loop
// (in simple protocol, which needs no prepared statement) until Stop. A client's connection
// failure is kept for Stop to return.
func (b *Bouncer) StartTraffic(ctx context.Context, clients int) (*Traffic, error) {
	u, err := url.Parse(b.URL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &Traffic{cancel: cancel}
	conns := make([]*pgx.Conn, 0, clients)
	for range clients {
		conn, err := pgx.Connect(ctx, u.String())
		if err != nil {
			cancel()
			for _, c := range conns {
				_ = c.Close(context.Background())
			}
			return nil, fmt.Errorf("pgbouncer: a traffic client: %w", err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer func() { _ = conn.Close(context.Background()) }()
			for ctx.Err() == nil {
				if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
					if ctx.Err() == nil {
						t.mu.Lock()
						t.err = errors.Join(t.err, err)
						t.mu.Unlock()
					}
					return
				}
				t.statements.Add(1)
			}
		}()
	}
	return t, nil
}

// Statements returns how many statements the traffic has run so far.
func (t *Traffic) Statements() int64 { return t.statements.Load() }

// Stop ends the traffic, waits for its clients to close and returns their errors, if any.
func (t *Traffic) Stop() error {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return fmt.Errorf("pgbouncer: traffic: %w", t.err)
	}
	return nil
}

// Busy starts PgBouncer in front of db (cfg as for Start) with clients other clients' short
// statements on it (none when clients is 0), for a test: both stop when t ends, and a failure to
// start either fails t.
func Busy(t testing.TB, db *pgtest.Server, cfg *Config, clients int) *Bouncer {
	t.Helper()
	b, err := Start(t.Context(), db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if clients == 0 {
		return b
	}
	traffic, err := b.StartTraffic(t.Context(), clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := traffic.Stop(); err != nil {
			t.Error(err)
		}
	})
	return b
}

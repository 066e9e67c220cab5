// Package pooler tells whether connections reach PostgreSQL through a transaction pooler
// (PgBouncer in pool_mode transaction or statement, RDS Proxy), and which pgx query modes work
// there.
//
// Behind a transaction pooler each transaction, and each statement outside one, may run on a
// different server connection, which other clients use in between. pgx's default query mode,
// cache_statement, prepares named statements on the server connection it happens to be given
// and uses them later on another (SQLSTATE 42P05 "already exists", 26000 "does not exist");
// describe_exec uses an unnamed statement from one round trip in the next, which fails the
// same way outside a transaction. cache_describe, exec and simple_protocol send each statement
// whole. Of these cache_describe keeps cache_statement's parameter types (a []byte for a jsonb
// column stays JSON), which the other two do not.
package pooler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SafeMode is the query mode sqsinbox uses behind a transaction pooler when none is configured.
const SafeMode = pgx.QueryExecModeCacheDescribe

// ErrQueryMode is wrapped by Check's error: the pool's query mode fails behind the transaction
// pooler it reaches PostgreSQL through.
var ErrQueryMode = errors.New("the pool reaches PostgreSQL through a transaction pooler (PgBouncer in transaction mode, RDS Proxy), " +
	"where its query mode fails (prepared statements used on another server connection)")

// ModeName is m as default_query_exec_mode spells it.
func ModeName(m pgx.QueryExecMode) string {
	return strings.ReplaceAll(m.String(), " ", "_")
}

// ModeSafe reports whether query mode m works behind a transaction pooler.
func ModeSafe(m pgx.QueryExecMode) bool {
	return m != pgx.QueryExecModeCacheStatement && m != pgx.QueryExecModeDescribeExec
}

// probes is how many times Detect compares the two connections' server sessions.
const probes = 4

// Detect reports whether connections made with cfg reach PostgreSQL through a transaction
// pooler. It opens two connections of its own (simple protocol, so that the probe works in
// any mode) and reads pg_backend_pid() on each in turn, a few times: on a direct connection (or
// a session pooler) each client keeps its own server session, while a transaction pooler hands
// the server connection one client just released to the next (PgBouncer reuses the most recent
// one first), or a client's next statement to another server connection.
func Detect(ctx context.Context, cfg *pgx.ConnConfig) (bool, error) {
	c := cfg.Copy()
	c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return false, fmt.Errorf("detect a pooler: connect: %w", err)
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
	b, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return false, fmt.Errorf("detect a pooler: connect: %w", err)
	}
	defer func() { _ = b.Close(context.WithoutCancel(ctx)) }()
	seen := map[*pgx.Conn]uint32{}
	for range probes {
		var pids [2]uint32
		for i, conn := range []*pgx.Conn{a, b} {
			if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
				return false, fmt.Errorf("detect a pooler: %w", err)
			}
			if last, ok := seen[conn]; ok && last != pids[i] {
				return true, nil
			}
			seen[conn] = pids[i]
		}
		if pids[0] == pids[1] {
			return true, nil
		}
	}
	return false, nil
}

// Check returns an error wrapping ErrQueryMode, naming the fix, when pool's default query mode
// fails behind a transaction pooler and pool reaches PostgreSQL through one. what names the
// caller ("inbox", "outbox").
func Check(ctx context.Context, pool *pgxpool.Pool, what string) error {
	cc := pool.Config().ConnConfig
	if ModeSafe(cc.DefaultQueryExecMode) {
		return nil
	}
	behind, err := Detect(ctx, cc)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if behind {
		return fmt.Errorf("%s: %w: query mode %s; add default_query_exec_mode=%s to the connection URL "+
			"(DATABASE_URL), or set pgxpool Config.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe",
			what, ErrQueryMode, ModeName(cc.DefaultQueryExecMode), ModeName(SafeMode))
	}
	return nil
}

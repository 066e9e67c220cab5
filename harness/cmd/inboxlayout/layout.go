package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// kind is an inbox layout.
type kind int

const (
	// single is L0, today's layout: one table processed_messages, PK (handler, event_id), an index
	// on seen_at, purged by DELETE.
	single kind = iota
	// partitioned is L1: processed_messages PARTITION BY LIST (gen), PK (handler, event_id, gen);
	// a claim takes an advisory lock per key, then (in a new statement) inserts the keys found in
	// no live generation into the parent.
	partitioned
	// genTables is L2: one plain table per generation, probed by name with UNION ALL. The
	// prototype addresses L1's partitions directly (a partition is an ordinary table when named
	// directly), so it shares L1's data.
	genTables
)

func (k kind) String() string {
	return [...]string{"L0 single", "L1 partitioned", "L2 gen-tables"}[k]
}

// Claim settings, as the inbox's defaults.
const (
	lockTimeoutMS = 5000
	idleTimeoutMS = 60000
	baseGen       = 1000 // the current generation at start
	handlers      = 4    // distinct handler names
)

// layout is one prototype inbox in a schema of its own.
type layout struct {
	name   string
	kind   kind
	schema string // the schema of the inbox table (for L2: L1's schema whose partitions it uses)
	live   int    // generations a claim must probe: ceil(H/G)+1 (L1, L2)
	// oneStatement is the negative control: the advisory lock and the probe in one statement,
	// so the probe's snapshot predates the lock wait.
	oneStatement bool
	// shared: an L2 layout that uses an L1 schema's partitions as its generation tables.
	shared bool

	cur     atomic.Int32 // the current generation (simulated clock)
	minLive atomic.Int32 // the oldest live generation
	newest  atomic.Int32 // the newest generation that exists (created ahead)
}

func newLayout(name string, k kind, schema string, live int) *layout {
	l := &layout{name: name, kind: k, schema: schema, live: live}
	l.cur.Store(baseGen)
	l.minLive.Store(int32(baseGen - max(live, 1) + 1))
	l.newest.Store(baseGen + 1)
	return l
}

func (l *layout) table() string { return l.schema + ".processed_messages" }

func (l *layout) part(gen int32) string { return fmt.Sprintf("%s.pm_g%d", l.schema, gen) }

const columns = "handler text NOT NULL, event_id text NOT NULL, %s seen_at timestamptz NOT NULL DEFAULT now(), " +
	"source integer, message_id uuid, receive_count smallint, trace_id bytea"

func l0Columns() string { return fmt.Sprintf(columns, "") }
func l1Columns() string { return fmt.Sprintf(columns, "gen integer NOT NULL,") }

const effectsDDL = "CREATE TABLE %s.effects (id bigserial PRIMARY KEY, event_id text NOT NULL, handler text NOT NULL)"

// gensDDL is the registry of generations (L2 reads it in every claim; L1 keeps it too): the newest
// generation that exists.
const gensDDL = "CREATE TABLE %s.gens (newest integer NOT NULL); INSERT INTO %s.gens VALUES (%d)"

func (l *layout) gensDDL() string { return fmt.Sprintf(gensDDL, l.schema, l.schema, l.newest.Load()) }

// createEmpty creates the schema with empty tables: for L1 the live generations and the next one.
// L2 layouts use an L1 schema and create nothing.
func (l *layout) createEmpty(ctx context.Context, pool *pgxpool.Pool) error {
	if l.shared {
		return nil
	}
	stmts := []string{
		"DROP SCHEMA IF EXISTS " + l.schema + " CASCADE",
		"CREATE SCHEMA " + l.schema,
		fmt.Sprintf(effectsDDL, l.schema),
		l.gensDDL(),
	}
	switch l.kind {
	case single:
		stmts = append(stmts,
			"CREATE TABLE "+l.table()+" ("+l0Columns()+", PRIMARY KEY (handler, event_id))",
			"CREATE INDEX processed_messages_seen_at_idx ON "+l.table()+" (seen_at)")
	case partitioned:
		stmts = append(stmts, "CREATE TABLE "+l.table()+" ("+l1Columns()+", PRIMARY KEY (handler, event_id, gen)) PARTITION BY LIST (gen)")
		for g := l.minLive.Load(); g <= l.newest.Load(); g++ {
			stmts = append(stmts, l.createPartition(g))
		}
	case genTables:
		for g := l.minLive.Load(); g <= l.newest.Load(); g++ {
			stmts = append(stmts, l.createPartition(g))
		}
	}
	return execAll(ctx, pool, stmts...)
}

// createPartition creates generation g: a partition (L1, and L2 on L1's tables) or a plain table
// unique on (handler, event_id) (L2).
func (l *layout) createPartition(g int32) string {
	if l.kind == genTables && !l.shared {
		return fmt.Sprintf("CREATE TABLE %s (%s, PRIMARY KEY (handler, event_id))", l.part(g), l1Columns())
	}
	return fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES IN (%d)", l.part(g), l.table(), g)
}

func execAll(ctx context.Context, pool *pgxpool.Pool, stmts ...string) error {
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// item is one event of a claim batch.
type item struct {
	handler, key string
	msgID        [16]byte
	trace        []byte
}

// claimArgs are a batch's arrays, in (handler, key) byte order.
func claimArgs(items []item) []any {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(strings.Compare(a.handler, b.handler), strings.Compare(a.key, b.key))
	})
	n := len(items)
	hs, ks, srcs, ids, cnts, trs := make([]string, n), make([]string, n), make([]int32, n),
		make([]pgtype.UUID, n), make([]int16, n), make([][]byte, n)
	for i, it := range items {
		hs[i], ks[i], srcs[i], ids[i], cnts[i], trs[i] = it.handler, it.key, 1, pgtype.UUID{Bytes: it.msgID, Valid: true}, 1, it.trace
	}
	return []any{hs, ks, srcs, ids, cnts, trs}
}

// The statements. setTimeouts is the CTE of today's batchClaim: it keeps the old lock_timeout in
// sqsinbox.lock_timeout for resetLockTimeout and bounds the claim's waits.
var setTimeouts = fmt.Sprintf("WITH s AS (SELECT set_config('sqsinbox.lock_timeout', current_setting('lock_timeout'), true), "+
	"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true)) ",
	lockTimeoutMS, idleTimeoutMS)

const resetLockTimeout = "SELECT set_config('lock_timeout', current_setting('sqsinbox.lock_timeout'), true)"

// setTimeoutsGen is setTimeouts for L1 and L2, which also turn enable_seqscan off for the claim:
// a generation starts empty, and a plan made then (a cached generic plan, or L2's new text) would
// otherwise scan it sequentially (a hash anti join over every partition for L1's NOT EXISTS)
// while it grows. The disabled seq scans' cost (1e10) would then trigger JIT compilation on every
// execution (jit_above_cost), so jit is off too. resetGen sets them back for the handler's
// statements.
var setTimeoutsGen = fmt.Sprintf("WITH s AS (SELECT set_config('sqsinbox.lock_timeout', current_setting('lock_timeout'), true), "+
	"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true), "+
	"set_config('sqsinbox.enable_seqscan', current_setting('enable_seqscan'), true), set_config('enable_seqscan', 'off', true), "+
	"set_config('sqsinbox.jit', current_setting('jit'), true), set_config('jit', 'off', true)) ",
	lockTimeoutMS, idleTimeoutMS)

const resetGen = "SELECT set_config('lock_timeout', current_setting('sqsinbox.lock_timeout'), true), " +
	"set_config('enable_seqscan', current_setting('sqsinbox.enable_seqscan'), true), set_config('jit', current_setting('sqsinbox.jit'), true)"

const unnestArgs = "unnest($1::text[], $2::text[], $3::int[], $4::uuid[], $5::int2[], $6::bytea[]) AS u(h, k, s, m, r, t)"

// keyHash is the advisory lock key of a claim: a 64-bit hash of handler and key.
const keyHash = `hashtextextended(u.h || E'\x01' || u.k, 0)`

// lockSQL takes the advisory locks of a batch's keys in ascending hash order (the sorted subquery
// feeds the volatile lock calls in its order), after the timeouts are set: the sort reads all of
// its input, so s is evaluated before the first lock.
func lockSQL() string {
	return setTimeoutsGen + "SELECT pg_advisory_xact_lock(q.x) FROM (SELECT DISTINCT " + keyHash +
		" AS x FROM s, unnest($1::text[], $2::text[]) AS u(h, k) ORDER BY 1) q"
}

func (l *layout) claimSQL() string {
	ins := " (handler, event_id, source, message_id, receive_count, trace_id) SELECT u.h, u.k, u.s, u.m, u.r, u.t FROM "
	order := ` ORDER BY u.h COLLATE "C", u.k COLLATE "C" ON CONFLICT DO NOTHING RETURNING handler, event_id`
	switch l.kind {
	case single:
		// Today's batchClaim.
		return setTimeouts + "INSERT INTO " + l.table() + ins + "s, " + unnestArgs + order
	case partitioned:
		// NOT (SELECT EXISTS ...), not NOT EXISTS: an anti join could be planned as a hash join
		// over every live partition; a subplan per key probes each partition's index.
		probe := " WHERE NOT (SELECT EXISTS (SELECT 1 FROM " + l.table() + " p WHERE p.handler = u.h AND p.event_id = u.k AND p.gen >= $8::int))"
		insert := "INSERT INTO " + l.table() + " (handler, event_id, gen, source, message_id, receive_count, trace_id) " +
			"SELECT u.h, u.k, $7::int, u.s, u.m, u.r, u.t FROM "
		if l.oneStatement {
			return setTimeoutsGen + ", l AS MATERIALIZED (SELECT count(pg_advisory_xact_lock(q.x)) AS n FROM (SELECT DISTINCT " + keyHash +
				" AS x FROM s, unnest($1::text[], $2::text[]) AS u(h, k) ORDER BY 1) q) " +
				insert + "l, " + unnestArgs + probe + " AND l.n >= 0" + order
		}
		return insert + unnestArgs + probe + order
	default:
		// L2: the probe names every generation that exists from the oldest live one on (the
		// ones newer than this transaction's current one too: a claim that began before a
		// switch must see rows written after it), and the insert names the current one.
		// The text is made before the lock wait, so a generation created during the wait (by a
		// switch) would be missed: the guard reads the registry with the statement's fresh
		// snapshot and fails the claim (22P02, retried) when a newer generation exists than the
		// text probes.
		newest := l.newest.Load()
		var probes []string
		for g := l.minLive.Load(); g <= newest; g++ {
			probes = append(probes, "SELECT 1 FROM "+l.part(g)+" p WHERE p.handler = u.h AND p.event_id = u.k")
		}
		guard := fmt.Sprintf(" AND (SELECT CASE WHEN g.newest <= %d THEN true ELSE (g.newest::text || ' %s')::int > 0 END FROM %s.gens g)",
			newest, staleProbeSet, l.schema)
		return "INSERT INTO " + l.part(l.cur.Load()) + " (handler, event_id, gen, source, message_id, receive_count, trace_id) " +
			"SELECT u.h, u.k, $7::int, u.s, u.m, u.r, u.t FROM " + unnestArgs +
			" WHERE NOT EXISTS (" + strings.Join(probes, " UNION ALL ") + ")" + guard + order
	}
}

// staleProbeSet marks the guard's error: the claim is run again with a new text.
const staleProbeSet = "stale probe set"

// errStale is a claim refused by L2's guard.
var errStale = errors.New("L2 claim: a generation was created during the lock wait; run the claim again")

// claimed is an open claim transaction: the keys it inserted, and the transaction.
type claimed struct {
	tx    pgx.Tx
	fresh []item
}

// claim begins a transaction and claims items, in one round trip, as RunBatch does: BEGIN,
// [lock,] claim, reset lock_timeout, SAVEPOINT.
func (l *layout) claim(ctx context.Context, conn *pgx.Conn, items []item) (*claimed, error) {
	args := claimArgs(items)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if l.kind != single && !l.oneStatement {
		b.Queue(lockSQL(), args[0], args[1])
	}
	fresh := map[[2]string]bool{}
	cur, minLive := l.cur.Load(), l.minLive.Load()
	switch l.kind {
	case single:
	case partitioned:
		args = append(args, cur, minLive)
	default:
		args = append(args, cur)
	}
	b.Queue(l.claimSQL(), args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var h, k string
			if err := rows.Scan(&h, &k); err != nil {
				return err
			}
			fresh[[2]string{h, k}] = true
		}
		return rows.Err()
	})
	if l.kind == single {
		b.Queue(resetLockTimeout)
	} else {
		b.Queue(resetGen)
	}
	b.Queue("SAVEPOINT sqsinbox_item")
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		if strings.Contains(err.Error(), staleProbeSet) {
			return nil, errStale
		}
		return nil, err
	}
	c := &claimed{tx: tx}
	for _, it := range items {
		if fresh[[2]string{it.handler, it.key}] {
			c.fresh = append(c.fresh, it)
			delete(fresh, [2]string{it.handler, it.key})
		}
	}
	return c, nil
}

// work runs each fresh item's effect in the item savepoint, as RunBatch runs a function.
func (c *claimed) work(ctx context.Context, schema string) error {
	for _, it := range c.fresh {
		if _, err := c.tx.Exec(ctx, "INSERT INTO "+schema+".effects (event_id, handler) VALUES ($1, $2)", it.key, it.handler); err != nil {
			return err
		}
		if _, err := c.tx.Exec(ctx, "RELEASE SAVEPOINT sqsinbox_item; SAVEPOINT sqsinbox_item"); err != nil {
			return err
		}
	}
	return nil
}

// runBatch is one whole batch: claim, effects, commit. It returns the number of fresh claims.
func (l *layout) runBatch(ctx context.Context, conn *pgx.Conn, items []item) (int, error) {
	c, err := l.claim(ctx, conn, items)
	for errors.Is(err, errStale) {
		c, err = l.claim(ctx, conn, items)
	}
	if err != nil {
		return 0, err
	}
	if err := c.work(ctx, l.effectsSchema()); err != nil {
		_ = c.tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	if err := c.tx.Commit(ctx); err != nil {
		return 0, err
	}
	return len(c.fresh), nil
}

// effectsSchema is where the layout's effects go (L2 shares L1's schema).
func (l *layout) effectsSchema() string { return l.schema }

// rotate switches to the next generation: creates the one after it ahead of time, moves the
// current generation, and forgets the oldest live one (detach concurrently + drop for L1, drop
// for L2). It returns the time spent forgetting.
func (l *layout) rotate(ctx context.Context, pool *pgxpool.Pool, forget bool) error {
	next := l.newest.Load() + 1
	if l.kind == single {
		l.newest.Store(next)
		l.cur.Add(1)
		return nil
	}
	switch {
	case l.kind == partitioned || l.shared:
		// Not CREATE TABLE ... PARTITION OF: that takes ACCESS EXCLUSIVE on the parent and would
		// stall every claim behind it. ATTACH takes SHARE UPDATE EXCLUSIVE, and the CHECK spares
		// its validating scan.
		p := l.part(next)
		if err := execAll(ctx, pool,
			fmt.Sprintf("CREATE TABLE %s (%s, PRIMARY KEY (handler, event_id, gen), CONSTRAINT gen_check CHECK (gen = %d))", p, l1Columns(), next),
			fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%d)", l.table(), p, next)); err != nil {
			return err
		}
	case l.kind == genTables:
		if err := execAll(ctx, pool, l.createPartition(next)); err != nil {
			return err
		}
	}
	if err := execAll(ctx, pool, fmt.Sprintf("UPDATE %s.gens SET newest = %d", l.schema, next)); err != nil {
		return err
	}
	l.newest.Store(next)
	l.cur.Add(1)
	if !forget {
		return nil
	}
	old := l.minLive.Load()
	l.minLive.Store(old + 1)
	if l.kind == genTables && !l.shared {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "SET lock_timeout = '100ms'"); err != nil {
			return err
		}
		_, err = dropRetry(ctx, conn.Conn(), "DROP TABLE "+l.part(old))
		_, _ = conn.Exec(ctx, "RESET lock_timeout")
		return err
	}
	_, err := detachDrop(ctx, pool, l, old)
	return err
}

// dropTimes are the phases of forgetting one generation.
type dropTimes struct {
	detach, drop float64 // seconds
	detachTries  int
	dropTries    int
}

// detachDrop forgets generation g: ALTER TABLE ... DETACH PARTITION ... CONCURRENTLY, then
// DROP TABLE with lock_timeout 100ms, retried.
func detachDrop(ctx context.Context, pool *pgxpool.Pool, l *layout, g int32) (dropTimes, error) {
	var t dropTimes
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return t, err
	}
	defer conn.Release()
	// DETACH ... CONCURRENTLY takes only SHARE UPDATE EXCLUSIVE on the parent, which claims
	// (ROW EXCLUSIVE) never wait behind, so it may wait long; the DROP of the detached table
	// waits 100ms at most per try.
	if _, err := conn.Exec(ctx, "SET lock_timeout = '60s'"); err != nil {
		return t, err
	}
	start := now()
	t.detachTries = 1
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY", l.table(), l.part(g))); err != nil {
		return t, fmt.Errorf("detach %s: %w", l.part(g), err)
	}
	t.detach = since(start)
	start = now()
	if _, err := conn.Exec(ctx, "SET lock_timeout = '100ms'"); err != nil {
		return t, err
	}
	t.dropTries, err = dropRetry(ctx, conn.Conn(), "DROP TABLE "+l.part(g))
	t.drop = since(start)
	_, _ = conn.Exec(ctx, "RESET lock_timeout")
	return t, err
}

// dropRetry runs stmt (with the session's lock_timeout) until it does not time out on a lock.
func dropRetry(ctx context.Context, conn *pgx.Conn, stmt string) (int, error) {
	for tries := 1; ; tries++ {
		_, err := conn.Exec(ctx, stmt)
		if err == nil {
			return tries, nil
		}
		if !isLockTimeout(err) || tries >= 1000 {
			return tries, fmt.Errorf("%s: %w", stmt, err)
		}
	}
}

func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

package inbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/pgpurge"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// The generations layout: the inbox's rows in processed_events, a table partitioned by a
// generation number, the claim's time divided by the generation length G. Forgetting drops whole
// generations older than the retention (a DETACH and a DROP: no dead tuples, no vacuum, the same
// cost at any size), where the table layout deletes row by row. A unique key on a partitioned
// table must include the partition key, so (handler, event_id) alone is not unique across
// generations: a claim first takes a transaction-scoped advisory lock on (handler, key), then, in
// a new statement (so its snapshot is taken after the wait), inserts the key into the current
// generation only if no live generation holds it. Two claims of one key on either side of a
// generation switch are serialised by the lock, so never both succeed, and a claim still waits
// for an uncommitted holder of its key (it holds the lock until it ends). See
// docs/how-it-works.md#the-generations-layout.

// Layout kinds, as inbox_layout records them.
const (
	// LayoutTable is processed_messages, one table, purged by DELETE: the default.
	LayoutTable = "table"
	// LayoutGenerations is processed_events, partitioned by generation (SwitchToGenerations).
	LayoutGenerations = "generations"
)

// generationsKind reports whether kind is one of the layouts in processed_events.
func generationsKind(kind string) bool { return kind == LayoutGenerations || kind == LayoutKeyTime }

// Bounds of the generation length.
const (
	MinGeneration = time.Minute
	MaxGeneration = 90 * 24 * time.Hour
)

// clockMargin is how far the clocks of the processes that claim in one inbox may disagree: a claim
// probes the generations from the one of now - Retention - clockMargin on, and a rotation drops
// only those that ended before now - Retention - 2 × clockMargin.
const clockMargin = 5 * time.Minute

// genLayout is an inbox's generations layout: its generation length and statements.
type genLayout struct {
	g       time.Duration
	legacy  bool   // processed_messages_legacy holds rows from before the switch: claims probe it
	keyTime bool   // LayoutKeyTime: keys that carry their time are routed by it (keytime.go)
	rows    string // what readers select from: processed_events, with the legacy rows if any
	lock    string // takes the batch's advisory locks, after bounding the claim's waits
	lockTx  string // RunTx's: the locks, with only the planner settings
	claim   string // the probe and the insert, returning the keys inserted; sets back what lock changed
	claimTx string // RunTx's: claim, setting back what lockTx changed
	unclaim string
	stats   string
	table   string // quoted processed_events
	// The keytime layout's claims (genClaimFor): of keys that are all fast, alone, for Run and
	// RunBatch and for RunTx; and of keys some of which are not, after the lock statement.
	fast, fastTx, routed string
}

// kind is the layout's name, as inbox_layout records it.
func (l *genLayout) kind() string {
	if l.keyTime {
		return LayoutKeyTime
	}
	return LayoutGenerations
}

func (l *genLayout) gen(t time.Time) int32 {
	return int32(math.Floor(float64(t.Unix()) / l.g.Seconds()))
}

// minLive is the oldest generation a claim at now must probe.
func (l *genLayout) minLive(now time.Time, retention time.Duration) int32 {
	return l.gen(now.Add(-retention - clockMargin))
}

func newGenLayout(c Config, g time.Duration, legacy, keyTime bool) *genLayout {
	t := sqlident.Quote(c.Schema, "processed_events")
	lt := sqlident.Quote(c.Schema, "processed_messages_legacy")
	rows, legacyProbe := t, ""
	if legacy {
		rows = sqlident.Quote(c.Schema, "inbox_rows") // both tables: legacyView
		legacyProbe = " AND NOT (SELECT EXISTS (SELECT 1 FROM " + lt + " l WHERE l.handler = u.h AND l.event_id = u.k))"
	}
	settings := "set_config('sqsinbox.enable_seqscan', current_setting('enable_seqscan'), true), set_config('enable_seqscan', 'off', true), " +
		"set_config('sqsinbox.jit', current_setting('jit'), true), set_config('jit', 'off', true)"
	// The locks in ascending order of their keys (the sorted subquery feeds the volatile lock
	// calls in its order, after s, which the sort reads first), so that batches never deadlock.
	// The schema is a validated identifier ([a-z_][a-z0-9_]*), safe in a literal.
	locks := "SELECT count(pg_advisory_xact_lock(q.x)) FROM (SELECT DISTINCT hashtextextended('" + c.Schema + "'" +
		" || E'\\x01' || u.h || E'\\x01' || u.k, 0) AS x FROM s, unnest($1::text[], $2::text[]) AS u(h, k) ORDER BY 1) q"
	l := &genLayout{
		g:       g,
		legacy:  legacy,
		keyTime: keyTime,
		rows:    rows,
		table:   t,
		// enable_seqscan and jit are off for the claim: a generation starts empty, and a plan
		// made then (a cached generic plan) would scan it sequentially while it grows; the
		// disabled scans' cost would then compile every execution.
		lock: fmt.Sprintf("WITH s AS (SELECT set_config('sqsinbox.lock_timeout', current_setting('lock_timeout'), true), "+
			"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true), %s) %s",
			c.LockTimeout.Milliseconds(), c.IdleInTransactionTimeout.Milliseconds(), settings, locks),
		lockTx: "WITH s AS (SELECT " + settings + ") " + locks,
		// NOT (SELECT EXISTS ...): a subplan per key probes each live generation's index, where
		// an anti join could be planned as a hash join over them all. The probe reaches to the
		// generation of now + clockMargin: a claim must see a row written in a newer generation
		// than its own, by a process whose clock is ahead, or by one that took the key's lock
		// between this claim's reading of the clock and its lock request (a holder inserts at
		// once after its lock, so its row's generation is that of a time before this claim's
		// wait began). The generations further ahead, made early and empty, are not probed.
		//
		// The claim sets back what lock changed, in a CTE that runs before its first row is
		// inserted (it is planned before it runs, under lock's settings): the handler's own
		// statements run as they would without the inbox. It waits for no lock (the key's
		// advisory lock is held), so lock_timeout can go back first. A claim that inserts nothing
		// may leave them set: no handler runs in that transaction.
		claim: claimGen(t, legacyProbe, "set_config('lock_timeout', current_setting('sqsinbox.lock_timeout'), true), "+resetPlanner),
		// RunTx's sets back the planner settings only: lockTx changes nothing else.
		claimTx: claimGen(t, legacyProbe, resetPlanner),
		unclaim: "DELETE FROM " + t + " WHERE (handler, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
		stats:   "SELECT handler, count(*), min(seen_at), max(seen_at) FROM " + rows + " r GROUP BY handler ORDER BY handler",
	}
	if keyTime {
		l.fast, l.fastTx = fastClaim(c, t, legacyProbe, true), fastClaim(c, t, legacyProbe, false)
		// The routed claim may wait for a fast claim's row: lock_timeout goes back after it
		// (resetLockTimeout), the planner settings in it.
		l.routed = routedClaim(t, legacyProbe, resetPlanner)
	}
	return l
}

// resetPlanner sets back the planner settings lock and lockTx change.
const resetPlanner = "set_config('enable_seqscan', current_setting('sqsinbox.enable_seqscan'), true), set_config('jit', current_setting('sqsinbox.jit'), true)"

// claimGen is the claim statement on table t: the settings' reset in a CTE, then the probe and
// the insert.
func claimGen(t, legacyProbe, reset string) string {
	return "WITH z AS MATERIALIZED (SELECT " + reset + ") " +
		"INSERT INTO " + t + " (handler, event_id, gen, " + deliveryColumns + ") SELECT u.h, u.k, $7::int, u.s, u.m, u.r, u.t " +
		"FROM z, unnest($1::text[], $2::text[], $3::int[], $4::uuid[], $5::int2[], $6::bytea[]) AS u(h, k, s, m, r, t) " +
		"WHERE NOT (SELECT EXISTS (SELECT 1 FROM " + t + " p WHERE p.handler = u.h AND p.event_id = u.k AND p.gen BETWEEN $8::int AND $9::int))" + legacyProbe + " " +
		`ORDER BY u.h COLLATE "C", u.k COLLATE "C" ON CONFLICT DO NOTHING RETURNING handler, event_id`
}

// generations returns the inbox's generations layout, or nil when it is in the table layout (or
// has not read its layout yet: Check reads it, and a claim that finds processed_messages gone
// reads it again).
func (ib *Inbox) generations() *genLayout { return ib.lay.Load() }

// readRows runs read, a path that reads or forgets the inbox's rows (Lookup, List, Stats, Purge,
// Rotate), in the layout this process last read (reading it first if it has not: these may run
// without Check), and once more in the layout read again when read finds its own stale: its table
// gone (another process switched the layout, or dropped the legacy table and the view over it,
// since this one read it) or, for Rotate, no generations (errNoGenerations). It is the claims'
// mechanism (layoutMoved) for every path that is not a claim, so that a process that has made no
// claim since the switch (a console, a CLI in a loop, a worker idle at the time) answers in the
// new layout. A schema from before the layout (migration 0005) is in the table layout.
func (ib *Inbox) readRows(ctx context.Context, read func(l *genLayout) error) error {
	if !ib.layRead.Load() {
		_, _, _ = ib.Layout(ctx) // on an error, read's own names what is missing
	}
	err := read(ib.lay.Load())
	if err != nil && ib.layoutMoved(ctx, err) {
		err = read(ib.lay.Load())
	}
	return err
}

// rowsOf is the quoted table (or view) of the inbox's rows in layout l (nil: the table layout).
func (ib *Inbox) rowsOf(l *genLayout) string {
	if l != nil {
		return l.rows
	}
	return sqlident.Quote(ib.cfg.Schema, "processed_messages")
}

// Layout reads the inbox's layout from the database: LayoutTable, LayoutGenerations or
// LayoutKeyTime, and the generation length of the latter two. The inbox claims in it from then on.
func (ib *Inbox) Layout(ctx context.Context) (string, time.Duration, error) {
	var kind string
	var secs *int32
	var legacy bool
	err := ib.pool.QueryRow(ctx, "SELECT kind, generation_seconds, legacy FROM "+sqlident.Quote(ib.cfg.Schema, "inbox_layout")).Scan(&kind, &secs, &legacy)
	if err != nil {
		return "", 0, fmt.Errorf("inbox: read the layout of schema %q: %w", ib.cfg.Schema, err)
	}
	ib.layRead.Store(true)
	if !generationsKind(kind) || secs == nil {
		ib.lay.Store(nil)
		return LayoutTable, 0, nil
	}
	g := time.Duration(*secs) * time.Second
	if cur := ib.lay.Load(); cur == nil || cur.g != g || cur.legacy != legacy || cur.kind() != kind {
		ib.lay.Store(newGenLayout(ib.cfg, g, legacy, kind == LayoutKeyTime))
	}
	return kind, g, nil
}

// LegacyRows reports whether, in the generations layout as last read ([Inbox.Layout]), the rows
// from before the switch are still in processed_messages_legacy.
func (ib *Inbox) LegacyRows() bool {
	l := ib.lay.Load()
	return l != nil && l.legacy
}

// layoutMoved reports whether err is a claim's or a reader's that found its table gone or closed
// (the inbox switched to the generations layout, or its legacy table was dropped, since this
// process read the layout) or found no generations (errNoGenerations), and the layout, read
// again, has changed: the claim or the read can run again at once.
func (ib *Inbox) layoutMoved(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	stale := errors.Is(err, errNoGenerations) || (errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.ConstraintName == legacyClosed))
	if !stale {
		return false
	}
	before := ib.lay.Load()
	if _, _, lerr := ib.Layout(context.WithoutCancel(ctx)); lerr != nil {
		return false
	}
	after := ib.lay.Load()
	return after != nil && (before == nil || before.legacy != after.legacy || before.g != after.g || before.keyTime != after.keyTime)
}

// legacyView is the view inbox_rows, what readers (Lookup, List, Stats) read while the legacy
// table is there: the rows of both tables.
func legacyView(schema string) string {
	cols := "handler, event_id, seen_at, " + deliveryColumns
	return "SELECT " + cols + " FROM " + sqlident.Quote(schema, "processed_events") +
		" UNION ALL SELECT " + cols + " FROM " + sqlident.Quote(schema, "processed_messages_legacy")
}

// legacyClosed is the constraint that closes processed_messages_legacy to new rows at the switch:
// a process that still claims in the table layout through a plan made before the switch (which
// names the table by its identity, not its name) fails instead of inserting there without the
// generations' lock.
const legacyClosed = "sqsinbox_legacy_closed"

// SwitchToGenerations moves the inbox in schema to the generations layout, of generation length
// generation (whole seconds from MinGeneration to MaxGeneration; the docs say how to pick it). It
// takes a moment's exclusive lock on processed_messages (waiting up to 10 s for the claims running
// to end), then new claims go to processed_events. An inbox with rows keeps them: the table is
// renamed processed_messages_legacy and closed to new rows, every claim probes it too (so a
// redelivery of an event it holds is still caught: there is no window), and the purge deletes
// its rows as they pass the retention, then drops it. An empty one is dropped at once.
//
// It is a separate, explicit step (`sqsinbox inbox layout generations`), taken once every process
// that claims in the schema runs a version that knows the layout: a process that does reads the
// new layout at its next claim; a binary from before it finds processed_messages gone (its claims
// fail as a broken deployment: it pauses and applies nothing) or closed. It refuses an inbox
// already switched.
func SwitchToGenerations(ctx context.Context, pool *pgxpool.Pool, schema string, generation time.Duration) error {
	return switchLayout(ctx, pool, schema, generation, false)
}

// SwitchToKeyTime is SwitchToGenerations to the keytime layout: processed_events as in the
// generations layout, with the keys that carry their time (UUIDv7, ULID: see [KeyTime]) routed by
// it, which makes their claims as cheap as the table layout's at any size. Other keys are claimed
// as in the generations layout. Processes of a version that does not know the keytime layout
// refuse to claim in it (they find processed_messages gone), as do those from before layouts.
func SwitchToKeyTime(ctx context.Context, pool *pgxpool.Pool, schema string, generation time.Duration) error {
	return switchLayout(ctx, pool, schema, generation, true)
}

func switchLayout(ctx context.Context, pool *pgxpool.Pool, schema string, generation time.Duration, keyTime bool) error {
	schema = orDefault(schema)
	if err := sqlident.Validate("inbox: schema", schema); err != nil {
		return err
	}
	if generation < MinGeneration || generation > MaxGeneration || generation%time.Second != 0 {
		return fmt.Errorf("inbox: generation %v: want whole seconds from %v to %v", generation, MinGeneration, MaxGeneration)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		var kind string
		if err := tx.QueryRow(ctx, "SELECT kind FROM "+sqlident.Quote(schema, "inbox_layout")+" FOR UPDATE").Scan(&kind); err != nil {
			return fmt.Errorf("inbox: read the layout of schema %q (run `sqsinbox migrate up` first): %w", schema, err)
		}
		if kind != LayoutTable {
			// From generations to keytime is refused too: a process still claiming in the
			// generations layout would not see a routed claim's uncommitted row.
			return fmt.Errorf("inbox: schema %q is in the %s layout already", schema, kind)
		}
		old := sqlident.Quote(schema, "processed_messages")
		if _, err := tx.Exec(ctx, "LOCK TABLE "+old+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("inbox: lock %s (a claim held it for more than 10 s; try again): %w", old, err)
		}
		var rows bool
		var at time.Time
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+old+"), now()").Scan(&rows, &at); err != nil {
			return err
		}
		l := newGenLayout(Config{Schema: schema}, generation, rows, keyTime)
		cur := l.gen(time.Now())
		stmts := []string{
			"CREATE TABLE " + l.table + ` (
    handler       text        NOT NULL,
    event_id      text        NOT NULL,
    gen           integer     NOT NULL,
    seen_at       timestamptz NOT NULL DEFAULT now(),
    source        integer,
    message_id    uuid,
    receive_count smallint,
    trace_id      bytea,
    PRIMARY KEY (handler, event_id, gen)
) PARTITION BY LIST (gen)`,
		}
		for g := cur - 1; g <= cur+aheadGenerations; g++ {
			stmts = append(stmts, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES IN (%d)", partition(schema, g), l.table, g))
		}
		if rows {
			stmts = append(stmts, "ALTER TABLE "+old+" RENAME TO processed_messages_legacy",
				"CREATE VIEW "+sqlident.Quote(schema, "inbox_rows")+" AS "+legacyView(schema))
			// Closed to new rows without a scan (NOT VALID checks new rows only; a new row's seen_at
			// is later than this transaction's now()). The time is a literal we format.
			stmts = append(stmts, "ALTER TABLE "+sqlident.Quote(schema, "processed_messages_legacy")+" ADD CONSTRAINT "+legacyClosed+
				" CHECK (seen_at < '"+at.UTC().Format(time.RFC3339Nano)+"'::timestamptz) NOT VALID")
		} else {
			stmts = append(stmts, "DROP TABLE "+old)
		}
		stmts = append(stmts, fmt.Sprintf("UPDATE %s SET kind = '%s', generation_seconds = %d, switched_at = now(), legacy = %v",
			sqlident.Quote(schema, "inbox_layout"), l.kind(), int64(generation/time.Second), rows))
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("inbox: switch to generations: %w", err)
			}
		}
		return nil
	})
}

// aheadGenerations is how many generations past the current one the rotation keeps made.
const aheadGenerations = 2

func partition(schema string, g int32) string {
	return sqlident.Quote(schema, "processed_events_g"+strconv.Itoa(int(g)))
}

var partitionName = regexp.MustCompile(`^processed_events_g(-?\d+)$`)

// rotateLockTimeout bounds each wait of a rotation's DDL for a claim's lock: a DETACH queued
// behind a long claim would hold up every claim after it.
const rotateLockTimeout = 200 * time.Millisecond

// Rotation is one rotation of the generations: what it made and dropped.
type Rotation struct {
	Created []int32 // generations made ahead (or attached after a crash between make and attach)
	Dropped []int32 // generations dropped
	// Rows is the planner's estimate of the rows the dropped generations held.
	Rows int64
	// Retried counts DDL statements that gave up a lock wait and ran again.
	Retried int
	// LegacyDeleted counts the rows deleted from processed_messages_legacy (the rows of the table
	// layout from before the switch), and LegacyDropped says it was empty and is dropped.
	LegacyDeleted int64
	LegacyDropped bool
	// Horizon is the start of the oldest generation kept: the rows before it are gone.
	Horizon time.Time
	// Skipped: another process held the rotation's lock.
	Skipped bool
	// Detach is the time spent detaching the dropped generations (claims wait while a DETACH
	// holds processed_events's lock); Drop the time spent dropping them once detached (freeing
	// their files, off the claims' path).
	Detach, Drop time.Duration
}

// Rotate runs one rotation of the generations (what [Inbox.PurgeOlderThan] runs in the generations
// and keytime layouts), forgetting the generations that ended before now - age and its clock
// margins, and reports it. It refuses an age shorter than the retention, and the table layout.
func (ib *Inbox) Rotate(ctx context.Context, age time.Duration) (Rotation, error) {
	if age < ib.cfg.Retention {
		return Rotation{}, fmt.Errorf("inbox: rotate age %v is shorter than the retention %v: rows still needed to catch redeliveries would go", age, ib.cfg.Retention)
	}
	var r Rotation
	err := ib.readRows(ctx, func(l *genLayout) error {
		if l == nil {
			return fmt.Errorf("inbox: schema %q is in the table layout: %w", ib.cfg.Schema, errNoGenerations)
		}
		var err error
		r, err = ib.rotate(ctx, l, age)
		return err
	})
	return r, err
}

// errNoGenerations is wrapped by Rotate's refusal of the table layout.
var errNoGenerations = errors.New("it has no generations to rotate (Purge deletes its rows)")

// rotate makes the generations around now (ensure), then drops those that ended before now - age
// - 2 × clockMargin, under an advisory lock (one process drops in a schema at a time; a rotation
// that finds it held skips). A crash at any point leaves what the next rotation finishes: a
// generation made and not attached is attached, one detached and not dropped is dropped.
func (ib *Inbox) rotate(ctx context.Context, l *genLayout, age time.Duration) (Rotation, error) {
	r, err := ib.rotateGenerations(ctx, l, age)
	if err != nil || r.Skipped || !l.legacy {
		return r, err
	}
	// After the rotation's connection is back in the pool: the purge takes one of its own.
	return r, ib.forgetLegacy(ctx, &r, age)
}

// rotateGenerations is rotate without the legacy table.
func (ib *Inbox) rotateGenerations(ctx context.Context, l *genLayout, age time.Duration) (Rotation, error) {
	var r Rotation
	conn, err := ib.pool.Acquire(ctx)
	if err != nil {
		return r, fmt.Errorf("inbox: rotate: connect: %w", err)
	}
	defer conn.Release()
	// The rotation's lock is transaction-scoped, taken again by each transaction that drops a
	// generation (a session lock would outlive its unlock behind a transaction pooler). This
	// first one only tells whether another process is rotating now.
	lockKey := "sqsinbox.purge." + ib.cfg.Schema + ".processed_events"
	got, err := ib.tryXactLock(ctx, conn.Conn(), lockKey)
	if err != nil {
		return r, fmt.Errorf("inbox: rotate: lock: %w", err)
	}
	if !got {
		r.Skipped = true
		return r, nil
	}
	if r.Created, err = ib.ensure(ctx, l, &r, conn.Conn()); err != nil {
		return r, err
	}
	parts, err := ib.listGenerations(ctx, conn.Conn())
	if err != nil {
		return r, err
	}
	dropBelow := l.gen(ib.now().Add(-age - 2*clockMargin))
	if l.keyTime {
		dropBelow = min(dropBelow, l.oldestRouted(ib.now())) // with a retention under G: ensure made them
	}
	r.Horizon = time.Unix(int64(dropBelow)*int64(l.g/time.Second), 0)
	for g, p := range parts {
		if g >= dropBelow {
			continue
		}
		// The DETACH in a transaction of its own: it holds processed_events's exclusive lock,
		// which claims wait for, until its commit, and a DROP's commit frees the table's files
		// (in proportion to their size) before it lets its locks go. The DROP then locks only the
		// detached table, which no claim reads. Each takes the rotation's lock and reads the
		// generation's state again under it: another process may have rotated since the list.
		held := true
		if p.attached {
			t := time.Now()
			err := ib.ddlTx(ctx, conn.Conn(), &r, func(tx pgx.Tx) error {
				st, err := ib.lockedGeneration(ctx, tx, lockKey, g)
				if held = st != genBusy; err != nil || !st.attached() {
					return err
				}
				_, err = tx.Exec(ctx, "ALTER TABLE "+l.table+" DETACH PARTITION "+partition(ib.cfg.Schema, g))
				return err
			})
			if err != nil {
				return r, fmt.Errorf("inbox: rotate: detach generation %d: %w", g, err)
			}
			r.Detach += time.Since(t)
		}
		if !held {
			break // another process rotates now
		}
		t := time.Now()
		dropped := false
		err := ib.ddlTx(ctx, conn.Conn(), &r, func(tx pgx.Tx) error {
			st, err := ib.lockedGeneration(ctx, tx, lockKey, g)
			if held = st != genBusy; err != nil || st != genDetached {
				return err
			}
			_, err = tx.Exec(ctx, "DROP TABLE "+partition(ib.cfg.Schema, g))
			dropped = err == nil
			return err
		})
		if err != nil {
			return r, fmt.Errorf("inbox: rotate: drop generation %d (detached): %w", g, err)
		}
		if !held {
			break
		}
		if dropped {
			r.Drop += time.Since(t)
			r.Dropped = append(r.Dropped, g)
			r.Rows += max(p.tuples, 0)
		}
	}
	slices.Sort(r.Dropped)
	return r, nil
}

// forgetLegacy deletes the rows of processed_messages_legacy past age, by the database's clock
// as the table layout does, and drops the table once it is empty: claims stop probing it (each
// process reads the layout again when its claim finds the table gone).
func (ib *Inbox) forgetLegacy(ctx context.Context, r *Rotation, age time.Duration) error {
	res, err := pgpurge.Run(ctx, ib.pool, pgpurge.Target{
		Schema:    ib.cfg.Schema,
		Table:     "processed_messages_legacy",
		Column:    "seen_at",
		Retention: age,
		BatchSize: ib.cfg.PurgeBatchSize,
		LockKey:   "sqsinbox.purge." + ib.cfg.Schema + ".processed_messages_legacy",
	})
	r.LegacyDeleted, r.Rows = res.Deleted, r.Rows+res.Deleted
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		// Another process dropped it since this one read the layout.
		_, _, err = ib.Layout(ctx)
		return err
	}
	if err != nil {
		return fmt.Errorf("inbox: rotate: purge processed_messages_legacy: %w", err)
	}
	if res.Skipped {
		return nil // another process purges it now
	}
	conn, err := ib.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("inbox: rotate: connect: %w", err)
	}
	defer conn.Release()
	var left bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+sqlident.Quote(ib.cfg.Schema, "processed_messages_legacy")+")").Scan(&left); err != nil {
		return fmt.Errorf("inbox: rotate: %w", err)
	}
	if left {
		return nil
	}
	// IF EXISTS: another process may have found it empty too.
	if err := ib.ddl(ctx, conn.Conn(), r, "DROP VIEW IF EXISTS "+sqlident.Quote(ib.cfg.Schema, "inbox_rows"),
		"DROP TABLE IF EXISTS "+sqlident.Quote(ib.cfg.Schema, "processed_messages_legacy"),
		"UPDATE "+sqlident.Quote(ib.cfg.Schema, "inbox_layout")+" SET legacy = false"); err != nil {
		return fmt.Errorf("inbox: rotate: drop processed_messages_legacy: %w", err)
	}
	r.LegacyDropped = true
	_, _, err = ib.Layout(ctx)
	return err
}

// genPart is a table of a generation: attached to processed_events or not (a crash between its
// make and its attach, or its detach and its drop), and the planner's estimate of its rows.
type genPart struct {
	attached bool
	tuples   int64
}

// listGenerations returns the schema's generation tables by generation.
func (ib *Inbox) listGenerations(ctx context.Context, conn *pgx.Conn) (map[int32]genPart, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname, i.inhparent IS NOT NULL, c.reltuples::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'processed\_events\_g%'`, ib.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("inbox: list the generations: %w", err)
	}
	parts := map[int32]genPart{}
	for rows.Next() {
		var name string
		var p genPart
		if err := rows.Scan(&name, &p.attached, &p.tuples); err != nil {
			rows.Close()
			return nil, err
		}
		if m := partitionName.FindStringSubmatch(name); m != nil {
			if g, err := strconv.ParseInt(m[1], 10, 32); err == nil {
				parts[int32(g)] = p
			}
		}
	}
	return parts, rows.Err()
}

// ensure makes (or attaches) the generations from the previous one to aheadGenerations past now
// (in the keytime layout, from the oldest a key is routed to, to the newest) that are missing, each
// in a transaction that holds an advisory lock of its own, waited for (making a generation is
// quick): the rotation calls it, and so do Check and a claim that found its generation missing.
// r, when not nil, counts the lock waits given up; conn, when not nil, is the connection to use
// (the rotation's: a pool of one connection must not deadlock).
func (ib *Inbox) ensure(ctx context.Context, l *genLayout, r *Rotation, conn *pgx.Conn) ([]int32, error) {
	if r == nil {
		r = &Rotation{}
	}
	if conn == nil {
		pc, err := ib.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("inbox: make generations: connect: %w", err)
		}
		defer pc.Release()
		conn = pc.Conn()
	}
	parts, err := ib.listGenerations(ctx, conn)
	if err != nil {
		return nil, err
	}
	now := ib.now()
	cur := l.gen(now)
	oldest, last := cur-1, cur+aheadGenerations
	if l.keyTime {
		// The generations a claim may route a key to (keytime.go): back to oldestRouted, and up
		// to that of a key's time clockMargin ahead of this clock.
		oldest, last = min(oldest, l.oldestRouted(now)), max(last, l.gen(now.Add(clockMargin))+1)
	}
	lockKey := "sqsinbox.generations." + ib.cfg.Schema
	var made []int32
	for g := oldest; g <= last; g++ {
		if p, ok := parts[g]; ok && p.attached {
			continue
		}
		// The lock is transaction-scoped (a pooler splits a session's statements), taken by the
		// transaction that makes the generation, which reads its state again under the lock:
		// another process may have made it since the list was read.
		did := false
		err := ib.ddlTx(ctx, conn, r, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lockKey); err != nil {
				return err
			}
			st, err := ib.generationState(ctx, tx, g)
			if err != nil || st.attached() {
				return err
			}
			if st == genMissing {
				// CREATE and ATTACH, not PARTITION OF: ATTACH takes a lock on the parent that
				// claims do not conflict with.
				if _, err := tx.Exec(ctx, "CREATE TABLE "+partition(ib.cfg.Schema, g)+" (LIKE "+l.table+" INCLUDING DEFAULTS)"); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%d)", l.table, partition(ib.cfg.Schema, g), g))
			did = err == nil
			return err
		})
		if err != nil {
			return made, fmt.Errorf("inbox: make generation %d: %w", g, err)
		}
		if did {
			made = append(made, g)
		}
	}
	return made, nil
}

// genState is a generation table's state, read in a transaction.
type genState int

const (
	genMissing  genState = iota // no table
	genDetached                 // a table, not attached to processed_events
	genAttached                 // a table attached to processed_events
	genBusy                     // not read: another process holds the rotation's lock
)

func (s genState) attached() bool { return s == genAttached }

// generationState reads generation g's table state in tx.
func (ib *Inbox) generationState(ctx context.Context, tx pgx.Tx, g int32) (genState, error) {
	var exists, attached bool
	err := tx.QueryRow(ctx, `SELECT c.oid IS NOT NULL, EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
FROM (SELECT to_regclass($1) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid`, partition(ib.cfg.Schema, g)).Scan(&exists, &attached)
	switch {
	case err != nil:
		return genMissing, fmt.Errorf("inbox: read generation %d: %w", g, err)
	case attached:
		return genAttached, nil
	case exists:
		return genDetached, nil
	}
	return genMissing, nil
}

// lockedGeneration takes the rotation's lock named key in tx, if no other process holds it
// (genBusy if one does), and reads generation g's state under it.
func (ib *Inbox) lockedGeneration(ctx context.Context, tx pgx.Tx, key string, g int32) (genState, error) {
	got, err := pgpurge.TryXactLock(ctx, tx, key)
	if err != nil || !got {
		return genBusy, err
	}
	return ib.generationState(ctx, tx, g)
}

// tryXactLock reports whether the advisory lock named key was free: it takes it in a
// transaction of its own on conn, which ends at once.
func (ib *Inbox) tryXactLock(ctx context.Context, conn *pgx.Conn, key string) (got bool, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		got, err = pgpurge.TryXactLock(ctx, tx, key)
		return err
	})
	return got, err
}

// noGeneration reports err as an insert into a generation that does not exist yet (the rotation
// is late, or this process's clock ahead), after making the missing ones: the claim can run
// again.
func (ib *Inbox) noGeneration(ctx context.Context, err error) bool {
	l := ib.lay.Load()
	var pgErr *pgconn.PgError
	if l == nil || !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(pgErr.Message, "no partition") {
		return false
	}
	_, eerr := ib.ensure(context.WithoutCancel(ctx), l, nil, nil)
	return eerr == nil
}

// ddl runs stmts in one transaction with a short lock_timeout: ddlTx.
func (ib *Inbox) ddl(ctx context.Context, conn *pgx.Conn, r *Rotation, stmts ...string) error {
	return ib.ddlTx(ctx, conn, r, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// ddlTx runs fn in one transaction with a short lock_timeout, again after a growing pause while
// a lock wait gives up (up to 50 times, about a minute in all), so that it never holds up claims
// for longer than rotateLockTimeout at a time.
func (ib *Inbox) ddlTx(ctx context.Context, conn *pgx.Conn, r *Rotation, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", rotateLockTimeout.Milliseconds())); err != nil {
				return err
			}
			return fn(tx)
		})
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" || attempt == 50 {
			return err
		}
		r.Retried++
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(attempt) * 40 * time.Millisecond):
		}
	}
}

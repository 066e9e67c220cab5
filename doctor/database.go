package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// checkDatabase checks the database the worker uses. It reads through a pool of its own, made
// from the worker's pool's configuration with the simple protocol, so that its own statements
// run behind any pooler whatever query mode the worker's configuration asks for.
func (r *run) checkDatabase(ctx context.Context) {
	r.checked("database")
	pcfg := r.deps.Pool.Config()
	mode := pcfg.ConnConfig.DefaultQueryExecMode
	poolSize := r.cfg.PoolSize
	if poolSize == 0 {
		poolSize = int(pcfg.MaxConns)
	}
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pcfg.MaxConns, pcfg.MinConns = 2, 0
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err == nil {
		defer pool.Close()
		err = pool.Ping(ctx)
	}
	where := fmt.Sprintf("%s:%d/%s as %s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database, pcfg.ConnConfig.User)
	if err != nil {
		r.add(Finding{Severity: Error, Check: "database.reachable", Setting: "database " + where,
			Seen: oneLine(err), Want: "a server that accepts the worker's connection",
			Fix: "check DATABASE_URL (host, port, database, user, password) and the network path (security groups)"})
		return
	}
	schema := r.cfg.Inbox.Schema
	ib, err := inbox.New(pool, &r.cfg.Inbox)
	if err != nil {
		r.add(Finding{Severity: Error, Check: "inbox.config", Setting: "the inbox's configuration", Seen: oneLine(err), Want: "a valid one", Fix: "see the error"})
		return
	}
	migrated := r.checkMigrations(ctx, "inbox", "the inbox's migrations in schema "+schema, func() (int, int, error) {
		return inbox.MigrationVersions(ctx, pool, schema)
	})
	layout := ""
	if migrated {
		l, _, err := ib.Layout(ctx)
		if err != nil {
			r.add(Finding{Severity: Error, Check: "inbox.layout", Setting: schema + ".inbox_layout", Seen: oneLine(err),
				Want: "the inbox's layout, readable by the worker's role", Fix: "run `sqsinbox migrate up`, and GRANT SELECT on it to the worker's role"})
		} else {
			layout = l
		}
	}
	outboxUsed := r.checkOutbox(ctx, pool, schema)
	if layout != "" {
		r.checkGrants(ctx, pool, schema, layout, outboxUsed)
		r.checkOldestRow(ctx, ib)
	}
	r.checkDurability(ctx, ib)
	r.checkPoolSize(poolSize)
	r.checkPooler(ctx, r.deps.Pool.Config(), mode)
	r.checkClock(ctx, pool, layout)
}

// checkMigrations reports a schema behind this binary's migrations, or ahead of them, and
// returns whether it is exactly current.
func (r *run) checkMigrations(ctx context.Context, what, setting string, versions func() (int, int, error)) bool {
	applied, known, err := versions()
	switch {
	case err != nil:
		r.add(Finding{Severity: Error, Check: what + ".migrations", Setting: setting, Seen: oneLine(err),
			Want: "readable", Fix: "GRANT USAGE on the schema and SELECT on its version table to the worker's role"})
		return false
	case applied < known:
		r.add(Finding{Severity: Error, Check: what + ".migrations", Setting: setting,
			Seen: fmt.Sprintf("version %d", applied), Want: fmt.Sprintf("version %d", known),
			Fix: "run `sqsinbox migrate up` (or the program's `migrate` subcommand) before the worker starts; it refuses to start until then"})
		return false
	case applied > known:
		r.add(Finding{Severity: Error, Check: what + ".migrations", Setting: setting,
			Seen: fmt.Sprintf("version %d", applied), Want: fmt.Sprintf("at most version %d, the newest this binary knows", known),
			Fix: "a newer release migrated the schema: deploy that release (or newer), or revert its migrations with its own `sqsinbox migrate down`"})
		return false
	}
	return ctx.Err() == nil
}

// checkOutbox checks the outbox when it is required or its migrations have been applied, and
// returns whether it is in use and migrated, so that its tables' grants are checked.
func (r *run) checkOutbox(ctx context.Context, pool *pgxpool.Pool, schema string) bool {
	applied, _, err := outbox.MigrationVersions(ctx, pool, schema)
	if err == nil && applied == 0 && !r.cfg.Outbox {
		return false
	}
	r.checked("outbox")
	if !r.checkMigrations(ctx, "outbox", "the outbox's migrations in schema "+schema, func() (int, int, error) {
		return outbox.MigrationVersions(ctx, pool, schema)
	}) {
		return false // reported; its tables are not checked further
	}
	ob, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		return true
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		r.add(Finding{Severity: Error, Check: "outbox.read", Setting: schema + ".outbox_messages", Seen: oneLine(err),
			Want: "readable", Fix: "GRANT SELECT, INSERT, UPDATE, DELETE ON " + schema + ".outbox_messages to the worker's role"})
		return true
	}
	if st.Parked > 0 {
		r.add(Finding{Severity: Warning, Check: "outbox.parked", Setting: schema + ".outbox_messages (parked)",
			Seen: fmt.Sprintf("%d parked", st.Parked), Want: "none",
			Fix: "the relay gave up on them: read why with `sqsinbox outbox list-parked`, fix it, then `sqsinbox outbox retry --all`"})
	}
	if st.OldestUnsent > DefaultOutboxAge {
		r.add(Finding{Severity: Warning, Check: "outbox.backlog", Setting: schema + ".outbox_messages (unsent)",
			Seen: fmt.Sprintf("%d unsent, the oldest %v old", st.Backlog, st.OldestUnsent.Round(time.Second)),
			Want: "none older than " + DefaultOutboxAge.String(),
			Fix:  "no relay is running, or it cannot keep up or cannot send: check the relay's logs and `sqsinbox stats`"})
	}
	return true
}

// tableNeeds is what the worker does to one of the tables of the schema.
type tableNeeds struct {
	name  string
	privs []string // SELECT, INSERT, UPDATE, DELETE
	owner bool     // the purge creates and drops its partitions
	// without, when set, is what the worker loses without the privileges while it still
	// processes messages: their lack is then a warning, not an error.
	without string
}

// checkGrants checks the role's privileges on every table of the schema the worker writes or
// reads.
func (r *run) checkGrants(ctx context.Context, pool *pgxpool.Pool, schema, layout string, outboxUsed bool) {
	needs := []tableNeeds{
		{name: "schema_migrations", privs: []string{"SELECT"}},
		{name: "inbox_sources", privs: []string{"SELECT", "INSERT", "UPDATE"}},
		{name: "inbox_layout", privs: []string{"SELECT"}},
		{name: "inbox_failures", privs: []string{"SELECT", "INSERT", "DELETE"},
			without: "the handlers' failures are not recorded (events show, dlq peek and the console show none), and the purge cannot forget them"},
	}
	if len(r.cfg.Routes) > 0 || r.cfg.PublishesRoutes {
		// An inboxhandler.Handler or Router publishes its routes at start, and a refused write
		// stops the start.
		needs = append(needs, tableNeeds{name: "inbox_routes", privs: []string{"SELECT", "INSERT", "UPDATE"}})
	}
	gens := layout == inbox.LayoutGenerations || layout == inbox.LayoutKeyTime
	if gens {
		needs = append(needs, tableNeeds{name: "processed_events", privs: []string{"SELECT", "INSERT", "DELETE"}, owner: true},
			tableNeeds{name: "processed_messages_legacy", privs: []string{"SELECT", "DELETE"}, owner: true})
		needs[2].privs = append(needs[2].privs, "UPDATE")
	} else {
		needs = append(needs, tableNeeds{name: "processed_messages", privs: []string{"SELECT", "INSERT", "DELETE"}})
	}
	if outboxUsed {
		needs = append(needs, tableNeeds{name: "outbox_messages", privs: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
			tableNeeds{name: outbox.VersionTable, privs: []string{"SELECT"}})
	}
	var usage, create bool
	if err := pool.QueryRow(ctx, sqlSchema, schema).Scan(&usage, &create); err != nil {
		r.add(Finding{Severity: Error, Check: "database.grants", Setting: "schema " + schema, Seen: oneLine(err), Want: "readable", Fix: "see the error"})
		return
	}
	if !usage {
		r.add(Finding{Severity: Error, Check: "database.grants", Setting: "USAGE on schema " + schema, Seen: "not granted", Want: "granted",
			Fix: "GRANT USAGE ON SCHEMA " + schema + " TO the worker's role"})
	}
	if gens && !create {
		r.add(Finding{Severity: Error, Check: "database.grants", Setting: "CREATE on schema " + schema, Seen: "not granted",
			Want: "granted (the " + layout + " layout's purge creates and drops generations)",
			Fix:  "GRANT CREATE ON SCHEMA " + schema + " TO the worker's role, or run the purge as the owner"})
	}
	names := make([]string, len(needs))
	for i, n := range needs {
		names[i] = n.name
	}
	rows, err := pool.Query(ctx, sqlTables, schema, names)
	if err != nil {
		r.add(Finding{Severity: Error, Check: "database.grants", Setting: "tables of schema " + schema, Seen: oneLine(err), Want: "readable", Fix: "see the error"})
		return
	}
	type granted struct {
		privs map[string]bool
		owner bool
	}
	have := map[string]granted{}
	for rows.Next() {
		var name string
		var sel, ins, upd, del, own bool
		if err := rows.Scan(&name, &sel, &ins, &upd, &del, &own); err != nil {
			break
		}
		have[name] = granted{privs: map[string]bool{"SELECT": sel, "INSERT": ins, "UPDATE": upd, "DELETE": del}, owner: own}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		r.add(Finding{Severity: Error, Check: "database.grants", Setting: "tables of schema " + schema, Seen: oneLine(err), Want: "readable", Fix: "see the error"})
		return
	}
	for _, n := range needs {
		g, ok := have[n.name]
		if !ok {
			if n.name == "processed_messages_legacy" {
				continue // only there until the purge has emptied it
			}
			r.add(Finding{Severity: Error, Check: "database.grants", Setting: schema + "." + n.name, Seen: "missing", Want: "the table",
				Fix: "run `sqsinbox migrate up`"})
			continue
		}
		var missing []string
		for _, p := range n.privs {
			if !g.privs[p] {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			sev, without := Error, "the worker pauses on every message (a broken deployment is not the message's fault) and processes nothing"
			if n.without != "" {
				sev, without = Warning, n.without
			}
			r.add(Finding{Severity: sev, Check: "database.grants", Setting: "privileges on " + schema + "." + n.name,
				Seen: "no " + strings.Join(missing, ", "), Want: strings.Join(n.privs, ", "),
				Fix: "GRANT " + strings.Join(missing, ", ") + " ON " + schema + "." + n.name + " TO the worker's role; without it " + without})
		}
		if n.owner && !g.owner {
			r.add(Finding{Severity: Error, Check: "database.grants", Setting: "owner of " + schema + "." + n.name,
				Seen: "another role", Want: "the worker's role (or a role it belongs to)",
				Fix: "the purge drops old generations, which only the owner may do: ALTER TABLE " + schema + "." + n.name + " OWNER TO the worker's role, or GRANT the owner role to it"})
		}
	}
}

// checkDurability reports synchronous_commit off, through the inbox's own start-up check.
func (r *run) checkDurability(ctx context.Context, ib *inbox.Inbox) {
	err := ib.CheckDurability(ctx)
	switch {
	case errors.Is(err, inbox.ErrAsyncCommit):
		r.add(Finding{Severity: Error, Check: "database.synchronous_commit", Setting: "synchronous_commit",
			Seen: "off", Want: "on (or local, remote_write, remote_apply)",
			Fix: "a commit can vanish in a crash after its message was deleted: a lost message; ALTER ROLE the worker's role SET synchronous_commit = on " +
				"(RDS: the parameter group), and the worker refuses to start until then"})
	case err != nil:
		r.add(Finding{Severity: Error, Check: "database.synchronous_commit", Setting: "synchronous_commit", Seen: oneLine(err), Want: "readable", Fix: "see the error"})
	case r.cfg.Inbox.AcceptAsyncCommit:
		var v string
		if pgErr := ib.Pool().QueryRow(ctx, sqlSyncCommit).Scan(&v); pgErr == nil && v == "off" {
			r.add(Finding{Severity: Warning, Check: "database.synchronous_commit", Setting: "synchronous_commit",
				Seen: "off, accepted (inbox Config.AcceptAsyncCommit)", Want: "on",
				Fix: "a crash can lose a message whose commit vanished after the delete; set synchronous_commit = on"})
		}
	}
}

// checkOldestRow reports inbox rows older than the retention and two purge intervals: no purge
// loop is running anywhere, and the table grows without end.
func (r *run) checkOldestRow(ctx context.Context, ib *inbox.Inbox) {
	oldest, now, err := ib.Oldest(ctx)
	if err != nil {
		r.add(Finding{Severity: Error, Check: "inbox.read", Setting: "the inbox's rows", Seen: oneLine(err), Want: "readable",
			Fix: "GRANT SELECT on the inbox's tables to the worker's role"})
		return
	}
	limit := r.cfg.Inbox.Retention + 2*r.cfg.Inbox.PurgeInterval
	if oldest.IsZero() || now.Sub(oldest) <= limit {
		return
	}
	r.add(Finding{Severity: Warning, Check: "inbox.purge", Setting: "the oldest inbox row",
		Seen: days(now.Sub(oldest).Truncate(time.Second)) + " old", Want: "at most the retention plus two purge intervals, " + days(limit),
		Fix: "no purge is running: workerapp programs run the purge loop beside the worker (inbox.Inbox.PurgeLoop); or run `sqsinbox purge` on a schedule"})
}

// checkPoolSize reports a pool smaller than the worker's concurrency plus the purge loop, the
// rule of inboxhandler's CheckCapacity, which the worker logs at start.
func (r *run) checkPoolSize(size int) {
	need := r.cfg.Worker.Concurrency + 1
	if size >= need {
		return
	}
	r.add(Finding{Severity: Warning, Check: "database.pool", Setting: "the worker's pool size (pool_max_conns)",
		Seen: fmt.Sprint(size), Want: fmt.Sprintf("at least %d (concurrency %d, plus the purge loop)", need, r.cfg.Worker.Concurrency),
		Fix: "handlers wait for a connection, and the wait counts against the handler timeout; raise pool_max_conns in DATABASE_URL or lower the concurrency"})
}

// checkPooler reports a transaction-mode pooler (PgBouncer's pool_mode = transaction, RDS Proxy)
// between the worker and the database when the worker's query mode uses a prepared statement
// across round trips (cache_statement, pgx's default, and describe_exec), which such a pooler
// may run on another server connection; the inbox's start-up check refuses that pool. The
// detection is the one the inbox and workerapp use (two connections of its own, comparing the
// server process that serves each statement); it changes nothing.
func (r *run) checkPooler(ctx context.Context, pcfg *pgxpool.Config, mode pgx.QueryExecMode) {
	if pooler.ModeSafe(mode) {
		return
	}
	behind, err := pooler.Detect(ctx, pcfg.ConnConfig)
	if err != nil || !behind {
		return
	}
	r.add(Finding{Severity: Error, Check: "database.pooler", Setting: "default_query_exec_mode behind a transaction-mode pooler",
		Seen: pooler.ModeName(mode), Want: "cache_describe, exec or simple_protocol",
		Fix: "the pooler runs each transaction (and each statement outside one) on any server connection, where a statement pgx " +
			"prepared on another is missing, and the worker's statements fail; add default_query_exec_mode=cache_describe to DATABASE_URL " +
			"(a workerapp program picks it by itself when the URL names no mode: its own `doctor` subcommand sees that; " +
			"or keep cache_statement with PgBouncer 1.21+ and max_prepared_statements > 0)"})
}

// checkClock reports this machine's clock far from the database's. The distance is measured
// against the middle of the round trip, so the round trip itself is not counted as skew.
func (r *run) checkClock(ctx context.Context, pool *pgxpool.Pool, layout string) {
	var best time.Duration
	var rtt time.Duration = -1
	for range 3 {
		t0 := r.cfg.Now()
		var db time.Time
		if err := pool.QueryRow(ctx, sqlClock).Scan(&db); err != nil {
			return
		}
		t1 := r.cfg.Now()
		if d := t1.Sub(t0); rtt < 0 || d < rtt {
			rtt, best = d, db.Sub(t0.Add(d/2))
		}
	}
	skew := best.Abs() - rtt/2
	if skew <= DefaultClockSkew {
		return
	}
	sev, want := Warning, "within "+DefaultClockSkew.String()
	if layout == inbox.LayoutKeyTime && skew > KeyTimeClockSkew {
		sev, want = Error, "within "+KeyTimeClockSkew.String()+" (the keytime layout routes keys by their time)"
	}
	dir := "ahead of"
	if best > 0 {
		dir = "behind"
	}
	r.add(Finding{Severity: sev, Check: "clock", Setting: "this machine's clock against the database's",
		Seen: fmt.Sprintf("%v %s it", skew.Round(time.Millisecond), dir), Want: want,
		Fix: "run NTP (chrony, or the Amazon Time Sync Service at 169.254.169.123) on this machine and the database's"})
}

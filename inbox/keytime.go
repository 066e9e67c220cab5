package inbox

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The keytime layout is the generations layout with one difference: a key that carries its time
// (a UUIDv7, or a ULID) is routed by that time. Its row goes to the generation of the key's time,
// gen(T), not of the claim's, and every claim of the key computes the same generation from the
// key alone, whatever its clock says. The primary key (handler, event_id, gen) is then unique per
// key, as processed_messages's is: the claim is one insert, with no advisory lock and no probe of
// the other generations, and it waits for an uncommitted holder of its key as any insert does on
// a unique index. Keys made in order (UUIDv7, ULID) also go to the right edge of the index, where
// its pages are in memory, however many rows it holds.
//
// gen(T)'s row is dropped with gen(T), at least Retention after gen(T) ended. That is Retention
// after the claim for a claim made while gen(T) is current or ahead ("fast"): one row is enough.
// A claim made later (the event waited past its generation's end) records the key twice: in
// gen(T), which keeps every claim of the key while it lives serialised by the primary key, and in
// the current generation, which keeps it for Retention after the claim. Such a claim takes the
// key's advisory lock and probes the live generations as the generations layout does, because a
// claim of a process whose clock is a little ahead may have found gen(T) already too old to route
// to, and recorded the key only in its current generation. A key whose generation is older than
// the live ones, or than the switch, is not routed at all; one whose time is more than the clocks'
// margin ahead of this process's clock is refused (ErrKeyTimeAhead) until it is not, up to the
// horizon (the retention and a day ahead): beyond it, the key carries no time (routeKey says why).

// LayoutKeyTime is processed_events routed by the keys' time (SwitchToKeyTime).
const LayoutKeyTime = "keytime"

// ErrKeyTimeAhead is wrapped by the error of a claim, in the keytime layout, of a key whose time is
// more than the clocks' margin (5 minutes) ahead of the claiming process's clock, and no more than
// Config.Retention and a day ahead: its generation may not be made yet, and a claim of it now
// that took it for a key without a time could be followed, within the retention, by one that
// routes it and does not see the first. The claim applies nothing; the event is retried, and
// succeeds once the clock has caught up (or goes to the dead-letter queue, if the producer's clock
// is that far ahead). A key further ahead (an ordinary id that happens to spell a ULID of a far
// year, or a producer's clock far off) is claimed as a key without a time.
var ErrKeyTimeAhead = fmt.Errorf("inbox: the key's time is more than %v ahead of this clock", clockMargin)

// keyTimeSlack is how far past the retention the key-time horizon lies (Inbox.keyTimeHorizon):
// far beyond any clock skew, so that a key classified as without a time is one no claim within
// the retention can route.
const keyTimeSlack = 24 * time.Hour

// keyTimeHorizon is how far ahead of the clock a key's time may be and still be a time, for an
// inbox of retention r: r + keyTimeSlack, at most the longest Duration.
func keyTimeHorizon(r time.Duration) time.Duration {
	if r > math.MaxInt64-keyTimeSlack {
		return math.MaxInt64
	}
	return r + keyTimeSlack
}

// KeyTime returns the time a key carries: a UUIDv7 in its canonical form (36 characters, any case)
// or a ULID (26 characters of Crockford's base32, any case), to the millisecond. ok is false for
// any other key.
func KeyTime(key string) (t time.Time, ok bool) {
	var ms int64
	switch len(key) {
	case 36:
		if key[8] != '-' || key[13] != '-' || key[18] != '-' || key[23] != '-' || key[14] != '7' {
			return time.Time{}, false
		}
		if v := key[19] | 0x20; v != '8' && v != '9' && v != 'a' && v != 'b' {
			return time.Time{}, false
		}
		for i := 0; i < 36; i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				continue
			}
			d, ok := hexDigit(key[i])
			if !ok {
				return time.Time{}, false
			}
			if i < 13 { // the first 48 bits: 8 digits, a dash, 4 digits
				ms = ms<<4 | int64(d)
			}
		}
	case 26:
		if key[0] > '7' {
			return time.Time{}, false // more than 128 bits
		}
		for i := 0; i < 26; i++ {
			d := crockford(key[i])
			if d < 0 {
				return time.Time{}, false
			}
			if i < 10 { // the first 50 bits, of which the top 2 are zero: 48 bits of milliseconds
				ms = ms<<5 | int64(d)
			}
		}
	default:
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// crockford is the value of a character of Crockford's base32 as ULIDs spell it (0-9 and A-Z
// without I, L, O and U, either case), or -1.
func crockford(c byte) int {
	if c >= 'a' && c <= 'z' {
		c -= 'a' - 'A'
	}
	return strings.IndexByte("0123456789ABCDEFGHJKMNPQRSTVWXYZ", c)
}

// route is where a claim in the keytime layout writes a key: gen is the generation of the key's
// time (not valid: not routed), and fast says that row is all it writes (no lock, no probe).
type route struct {
	gen  pgtype.Int4
	fast bool
}

// routeKey routes key for a claim at now, in layout l (keytime), or refuses a key too far ahead:
// one whose time is more than clockMargin ahead of now and no more than horizon (keyTimeHorizon of
// the retention R). A key further ahead carries no time, as one that does not parse: it is
// claimed as in the generations layout, inserted into the current generation if no live one
// holds it, under the key's advisory lock.
//
// That classification changes as the clock moves, but never from no time to routed within R, so
// every claim of a key within R of another looks where that one could have put it. A routed
// claim (fast, or late) needs the key's time at most clockMargin ahead of its clock. A claim that
// took the key for one without a time found it more than horizon = R + a day ahead of its own
// clock, which is at most clockMargin from the other's: a routed claim of it comes more than
// R + a day - 2 × clockMargin after, past the redelivery horizon the retention covers, where no
// layout promises to see the first claim. A claim in between (more than clockMargin and no more
// than horizon ahead) is refused and applies nothing, so it needs to see nothing. A late routed
// claim probes the live generations, as one of a key without a time does; only a fast claim
// probes nothing, and a fast claim is routed. The other way round, a key routed first is never
// taken for one without a time later: its time only falls behind the clock.
func (l *genLayout) routeKey(key string, now time.Time, horizon time.Duration) (route, error) {
	t, ok := KeyTime(key)
	if !ok || t.Sub(now) > horizon {
		return route{}, nil
	}
	if ahead := t.Sub(now); ahead > clockMargin {
		return route{}, fmt.Errorf("%w: key %q carries %s, %s ahead (a key up to %s ahead is refused until the clock catches up; one further ahead is claimed as a key without a time)",
			ErrKeyTimeAhead, key, t.UTC().Format(time.RFC3339Nano), aheadText(ahead), aheadText(horizon))
	}
	g := l.gen(t)
	switch {
	case g >= l.gen(now):
		return route{gen: pgtype.Int4{Int32: g, Valid: true}, fast: true}, nil
	case g >= l.oldestRouted(now):
		return route{gen: pgtype.Int4{Int32: g, Valid: true}}, nil
	}
	return route{}, nil
}

// aheadText shows how far ahead a key's time is: in days from two days on, else to the second.
func aheadText(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	}
	return d.Round(time.Second).String()
}

// oldestRouted is the oldest generation a claim at now routes a key to. A fast claim (of a
// process whose clock is up to clockMargin behind) must never follow a claim that did not route
// the key (of one whose clock is up to clockMargin ahead), since the fast one probes nothing: two
// margins back, and one generation more. ensure makes the generations from it on.
func (l *genLayout) oldestRouted(now time.Time) int32 {
	return l.gen(now.Add(-2*clockMargin)) - 1
}

// checkKeyTime refuses, in the keytime layout, a key whose time is too far ahead: before a batch's
// claim, so that it fails alone.
func (ib *Inbox) checkKeyTime(key string) error {
	if l := ib.generations(); l != nil && l.keyTime {
		_, err := l.routeKey(key, ib.now(), ib.keyTimeHorizon)
		return err
	}
	return nil
}

// genClaim is a claim's statements in the generations layouts and their arguments, for sorted
// keys with their deliveries' columns: lock (nil when no key needs the advisory lock, in the
// keytime layout) with lockArgs, then claim with claimArgs; after claim, reset when it is set.
type genClaim struct {
	lock, claim, reset  string
	lockArgs, claimArgs []any
}

// queue queues the claim's statements on b and returns the claim's.
func (c genClaim) queue(b *pgx.Batch) *pgx.QueuedQuery {
	if c.lock != "" {
		b.Queue(c.lock, c.lockArgs...)
	}
	q := b.Queue(c.claim, c.claimArgs...)
	if c.reset != "" {
		b.Queue(c.reset)
	}
	return q
}

// genClaimFor builds the claim of handlers and keys (with srcs, ids, counts and traces) in l, for
// RunTx when tx.
func (ib *Inbox) genClaimFor(l *genLayout, tx bool, handlers, keys []string, srcs []pgtype.Int4, ids []pgtype.UUID, counts []pgtype.Int2, traces [][]byte) (genClaim, error) {
	now := ib.now()
	cur, minLive, maxLive := l.gen(now), l.minLive(now, ib.cfg.Retention), l.gen(now.Add(clockMargin))
	arrays := []any{handlers, keys, srcs, ids, counts, traces}
	c := genClaim{lock: l.lock, claim: l.claim}
	if tx {
		c.lock, c.claim = l.lockTx, l.claimTx
	}
	if !l.keyTime {
		c.lockArgs, c.claimArgs = arrays[:2], append(arrays, cur, minLive, maxLive)
		return c, nil
	}
	gens, fast := make([]pgtype.Int4, len(keys)), make([]bool, len(keys))
	var lockH, lockK []string
	for i, k := range keys {
		r, err := l.routeKey(k, now, ib.keyTimeHorizon)
		if err != nil {
			return genClaim{}, err
		}
		gens[i], fast[i] = r.gen, r.fast
		if !r.fast {
			lockH, lockK = append(lockH, handlers[i]), append(lockK, k)
		}
	}
	if lockH == nil {
		// Every key fast: the table layout's claim, with the generation of each key.
		c.lock, c.claim, c.reset = "", l.fast, resetLockTimeout
		if tx {
			c.claim, c.reset = l.fastTx, ""
		}
		c.claimArgs = append(arrays, gens)
		return c, nil
	}
	c.claim = l.routed
	if !tx {
		c.reset = resetLockTimeout
	}
	c.lockArgs, c.claimArgs = []any{lockH, lockK}, append(arrays, cur, minLive, maxLive, gens, fast)
	return c, nil
}

// fastClaim is the keytime layout's claim of keys that are all fast: the table layout's batch
// claim (bounded waits when bound, see batchClaim) on processed_events, each key into the
// generation $7 gives it.
func fastClaim(c Config, t, legacyProbe string, bound bool) string {
	s, from := "", "FROM "
	if bound {
		s = fmt.Sprintf("WITH s AS (SELECT set_config('sqsinbox.lock_timeout', current_setting('lock_timeout'), true), "+
			"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true)) ",
			c.LockTimeout.Milliseconds(), c.IdleInTransactionTimeout.Milliseconds())
		from = "FROM s, "
	}
	where := ""
	if legacyProbe != "" {
		where = " WHERE true" + legacyProbe
	}
	return s + "INSERT INTO " + t + " (handler, event_id, gen, " + deliveryColumns + ") SELECT u.h, u.k, u.g, u.s, u.m, u.r, u.t " +
		from + "unnest($1::text[], $2::text[], $3::int[], $4::uuid[], $5::int2[], $6::bytea[], $7::int[]) AS u(h, k, s, m, r, t, g)" + where + " " +
		`ORDER BY u.h COLLATE "C", u.k COLLATE "C" ON CONFLICT DO NOTHING RETURNING handler, event_id`
}

// routedClaim is the keytime layout's claim when some key is not fast, after the lock statement
// has taken the advisory locks of those keys. Each routed key ($10 not null) is inserted into its
// generation; a fast one ($11) is claimed by that alone. The others (not routed, or routed and
// inserted there) are claimed as the generations layout claims: inserted into the current
// generation $7 unless a live generation, $8 to $9, holds them. (The sub-statements of a WITH do
// not see each other's rows: the probe does not find the row r has just inserted.)
func routedClaim(t, legacyProbe, reset string) string {
	return "WITH z AS MATERIALIZED (SELECT " + reset + "), " +
		"u AS MATERIALIZED (SELECT u.* FROM z, unnest($1::text[], $2::text[], $3::int[], $4::uuid[], $5::int2[], $6::bytea[], $10::int[], $11::bool[]) AS u(h, k, s, m, r, t, g, f)), " +
		"r AS (INSERT INTO " + t + " (handler, event_id, gen, " + deliveryColumns + ") SELECT u.h, u.k, u.g, u.s, u.m, u.r, u.t FROM u " +
		"WHERE u.g IS NOT NULL" + legacyProbe + ` ORDER BY u.h COLLATE "C", u.k COLLATE "C" ON CONFLICT DO NOTHING RETURNING handler, event_id), ` +
		"c AS (INSERT INTO " + t + " (handler, event_id, gen, " + deliveryColumns + ") SELECT u.h, u.k, $7::int, u.s, u.m, u.r, u.t FROM u " +
		"WHERE NOT u.f AND (u.g IS NULL OR (u.h, u.k) IN (SELECT handler, event_id FROM r)) " +
		"AND NOT (SELECT EXISTS (SELECT 1 FROM " + t + " p WHERE p.handler = u.h AND p.event_id = u.k AND p.gen BETWEEN $8::int AND $9::int))" + legacyProbe + " " +
		`ORDER BY u.h COLLATE "C", u.k COLLATE "C" ON CONFLICT DO NOTHING RETURNING handler, event_id) ` +
		"SELECT handler, event_id FROM r WHERE (handler, event_id) IN (SELECT h, k FROM u WHERE u.f) UNION ALL SELECT handler, event_id FROM c"
}

package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const table = "idempotency_keys"

type statements struct {
	claim, reread, takeover, complete string
}

func newStatements(t string) statements {
	return statements{
		// The INSERT is the lock; the read before it only spares a replay the insert attempt.
		// A key committed before the statement began is read (one primary-key lookup) and
		// returned, and nothing is inserted. Otherwise the INSERT runs: on a fresh key it returns
		// one row, fresh. On a key held by an uncommitted attempt (invisible to the read) it waits
		// up to lock_timeout: a timeout is a 409; a commit there returns no row at all (the
		// snapshot predates it), so the caller reads again; a rollback there lets the INSERT in.
		claim: `WITH cur AS (
	SELECT fingerprint, status, headers, body, expires_at <= now() AS expired
	FROM ` + t + ` WHERE key_hash = $1::bytea
), ins AS (
	INSERT INTO ` + t + ` (key_hash, fingerprint)
	SELECT $1::bytea, $2::bytea WHERE NOT EXISTS (SELECT FROM cur)
	ON CONFLICT (key_hash) DO NOTHING
	RETURNING 1
)
SELECT true, NULL::bytea, NULL::smallint, NULL::jsonb, NULL::bytea, false FROM ins
UNION ALL
SELECT false, fingerprint, status, headers, body, expired FROM cur`,
		reread: `SELECT false, fingerprint, status, headers, body, expires_at <= now()
FROM ` + t + ` WHERE key_hash = $1`,
		// An expired row is a new request: the attempt takes the row over in its transaction.
		takeover: `UPDATE ` + t + ` SET fingerprint = $2, status = NULL, headers = NULL, body = NULL, created_at = now()
WHERE key_hash = $1 AND expires_at <= now()`,
		// The row's expiry is set with the response, by the database's clock, from this
		// middleware's TTL: each key keeps the promise made when it was stored, and the purge
		// deletes by it.
		// The headers go as text cast to jsonb: a []byte would be sent as bytea in pgx's exec and
		// simple_protocol modes, which PostgreSQL refuses for jsonb (22P02).
		complete: `UPDATE ` + t + ` SET status = $2, headers = $3::text::jsonb, body = $4, expires_at = now() + make_interval(secs => $5)
WHERE key_hash = $1 AND status IS NULL`,
	}
}

// stored is a row as claim finds it.
type stored struct {
	fresh       bool
	fingerprint []byte
	status      *int16
	headers     []byte
	body        []byte
	expired     bool
}

// errInFlight means another attempt holds the key.
var errInFlight = errors.New("idempotency: the key is in flight")

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// beginClaim begins the attempt's transaction and claims the key in one round trip: BEGIN, the
// lease and wait settings, the claim, and the reset of lock_timeout travel as one pipelined
// batch. The claim waits up to the wait for an uncommitted attempt on the same key; the reset
// after it lets the handler's own statements wait as they normally would. The caller must roll
// the returned transaction back unless it commits it, also when err is not nil.
func (m *Middleware) beginClaim(ctx context.Context, kh, fp []byte) (pgx.Tx, stored, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	for _, q := range m.settings {
		b.Queue(q)
	}
	b.Queue(m.sql.claim, kh, fp)
	b.Queue("SET LOCAL lock_timeout TO DEFAULT")
	br := m.pool.SendBatch(ctx, b)
	tx := br.Tx()
	var err error
	for range 1 + len(m.settings) {
		if _, e := br.Exec(); err == nil {
			err = e
		}
	}
	row, found, e := scanStored(br.QueryRow())
	if err == nil {
		err = e
	}
	if _, e := br.Exec(); err == nil {
		err = e
	}
	if e := br.Close(); err == nil {
		err = e
	}
	if err != nil {
		if isLockTimeout(err) {
			return tx, stored{}, errInFlight
		}
		return tx, stored{}, err
	}
	row, err = m.settle(ctx, tx, kh, fp, row, found)
	return tx, row, err
}

// settle finishes a claim whose first statement found row (or, when found is false, nothing:
// the attempt it waited for committed after its snapshot). It reads again, takes an expired row
// over, or claims again if the row was purged meanwhile.
func (m *Middleware) settle(ctx context.Context, tx pgx.Tx, kh, fp []byte, row stored, found bool) (stored, error) {
	for attempt := 0; ; attempt++ {
		if !found {
			var err error
			row, found, err = scanStored(tx.QueryRow(ctx, m.sql.reread, kh))
			if err != nil {
				return stored{}, err
			}
		}
		switch {
		case !found:
			// purged meanwhile: claim again
		case row.fresh || !row.expired:
			return row, nil
		default:
			ok, err := m.takeover(ctx, tx, kh, fp)
			if err != nil {
				return stored{}, err
			}
			if ok {
				return stored{fresh: true}, nil
			}
			// Another attempt took the expired row over and committed: look again.
		}
		if attempt == 2 {
			return stored{}, errInFlight
		}
		var err error
		row, found, err = m.claimAgain(ctx, tx, kh, fp)
		if err != nil {
			return stored{}, err
		}
	}
}

// claimAgain runs the claim once more inside tx, with the wait.
func (m *Middleware) claimAgain(ctx context.Context, tx pgx.Tx, kh, fp []byte) (stored, bool, error) {
	var b pgx.Batch
	b.Queue(m.settings[0]) // lock_timeout = the wait
	b.Queue(m.sql.claim, kh, fp)
	b.Queue("SET LOCAL lock_timeout TO DEFAULT")
	br := tx.SendBatch(ctx, &b)
	_, err := br.Exec()
	row, found, e := scanStored(br.QueryRow())
	if err == nil {
		err = e
	}
	if _, e := br.Exec(); err == nil {
		err = e
	}
	if e := br.Close(); err == nil {
		err = e
	}
	if isLockTimeout(err) {
		return stored{}, false, errInFlight
	}
	return row, found, err
}

func (m *Middleware) takeover(ctx context.Context, tx pgx.Tx, kh, fp []byte) (bool, error) {
	var b pgx.Batch
	b.Queue(m.settings[0]) // lock_timeout = the wait
	b.Queue(m.sql.takeover, kh, fp)
	b.Queue("SET LOCAL lock_timeout TO DEFAULT")
	br := tx.SendBatch(ctx, &b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if isLockTimeout(err) {
		return false, errInFlight
	}
	return tag.RowsAffected() == 1, err
}

func scanStored(row pgx.Row) (stored, bool, error) {
	var s stored
	err := row.Scan(&s.fresh, &s.fingerprint, &s.status, &s.headers, &s.body, &s.expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	return s, err == nil, err
}

// complete stores the response in the attempt's transaction.
func (m *Middleware) complete(ctx context.Context, tx pgx.Tx, kh []byte, status int, h http.Header, body []byte) error {
	hj, err := encodeHeaders(h, m.replay)
	if err != nil {
		return err
	}
	if body == nil {
		body = []byte{}
	}
	tag, err := tx.Exec(ctx, m.sql.complete, kh, status, string(hj), body, m.cfg.TTL.Seconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("idempotency: the attempt's row was not found to complete")
	}
	return nil
}

// encodeHeaders keeps the allow-listed headers, in a stable order, as JSON [[name, value], ...].
func encodeHeaders(h http.Header, allow map[string]bool) ([]byte, error) {
	pairs := [][2]string{}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if !allow[http.CanonicalHeaderKey(name)] {
			continue
		}
		for _, v := range h[name] {
			pairs = append(pairs, [2]string{name, v})
		}
	}
	return json.Marshal(pairs)
}

func decodeHeaders(b []byte) ([][2]string, error) {
	var pairs [][2]string
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	err := json.Unmarshal(b, &pairs)
	return pairs, err
}

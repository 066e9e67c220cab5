package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsinbox/sqsinbox/internal/core/pgpurge"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Limits of the failure records.
const (
	// FailuresKept is how many failure records are kept per (handler, event): a new one replaces
	// the oldest. A message without a valid key keeps as many of its own.
	FailuresKept = 5
	// MaxFailureText is the most bytes of a failure's error text that are recorded; a longer
	// text is cut at a character boundary and ends with "…".
	MaxFailureText = 2048
	// maxMessageIDText bounds a recorded message id (SQS's are 36 characters).
	maxMessageIDText = 128
)

// Failure is one failed attempt of a handler at an event: what [Inbox.RecordFailures] records
// and [Inbox.Failures] returns. FailedAt and Instance are set by the database and the inbox
// when the failure is recorded; a caller leaves them empty.
type Failure struct {
	Handler string `json:"handler"`
	// EventID is the event's key; empty when the message had no valid key.
	EventID      string    `json:"event_id,omitempty"`
	MessageID    string    `json:"message_id"`
	Queue        string    `json:"queue,omitempty"`
	ReceiveCount int       `json:"receive_count,omitempty"`
	Error        string    `json:"error"`
	FailedAt     time.Time `json:"failed_at"`
	Instance     string    `json:"instance,omitempty"`
}

// failureStats counts the failure records the inbox could not write.
type failureStats struct {
	notRecorded atomic.Int64
}

// FailuresNotRecorded is how many failures [Inbox.RecordFailures] could not record since the
// inbox was made (the database refused or could not be reached).
func (ib *Inbox) FailuresNotRecorded() int64 { return ib.failures.notRecorded.Load() }

// failureText is s as recorded: valid UTF-8 without NUL (which a text column refuses), at most
// MaxFailureText bytes.
func failureText(s string) string { return cutText(s, MaxFailureText) }

// cutText is s as valid UTF-8 without NUL, cut at a character boundary to at most limit bytes,
// ending with "…" when cut.
func cutText(s string, limit int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// failuresInsert inserts the failures and trims each (handler, event), or (handler, message)
// when the event has no key, to its newest FailuresKept, in one statement: no session state, so
// it runs as it is behind a transaction-mode pooler. The trim sees the rows from before the
// statement, so it keeps FailuresKept-1 of them beside the new one.
func failuresInsert(schema string) string {
	t := sqlident.Quote(schema, "inbox_failures")
	return `WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::text[]) AS u(h, k, m, s, r, e)),
old AS (SELECT f.id, row_number() OVER (PARTITION BY f.handler, f.event_id, CASE WHEN f.event_id IS NULL THEN f.message_id END ORDER BY f.id DESC) AS n
  FROM ` + t + ` f JOIN (SELECT DISTINCT h, k, m FROM u) w
    ON f.handler = w.h AND (f.event_id = w.k OR (w.k IS NULL AND f.event_id IS NULL AND f.message_id = w.m))),
trim AS (DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM old WHERE n >= ` + fmt.Sprint(FailuresKept) + `))
INSERT INTO ` + t + ` (handler, event_id, message_id, source, receive_count, error) SELECT h, k, m, s, r, e FROM u`
}

// RecordFailures records failed attempts, in one statement of its own (never inside an event's
// transaction: call it after the attempt rolled back). Each failure's error text is kept to
// MaxFailureText bytes of valid UTF-8, and each (handler, event) keeps its newest FailuresKept.
// Recording is for operators only: the caller must not let its error change what happens to the
// message. An error is also counted ([Inbox.FailuresNotRecorded]) and logged (Config.Logger).
// With Config.NoFailureRecords it records nothing.
func (ib *Inbox) RecordFailures(ctx context.Context, fs []Failure) error {
	if len(fs) == 0 || ib.cfg.NoFailureRecords {
		return nil
	}
	n := len(fs)
	hs, ks, ms, es := make([]string, n), make([]pgtype.Text, n), make([]string, n), make([]string, n)
	srcs, counts := make([]pgtype.Int4, n), make([]pgtype.Int4, n)
	for i, f := range fs {
		hs[i], ms[i], es[i] = f.Handler, cutText(f.MessageID, maxMessageIDText), failureText(f.Error)
		if f.EventID != "" {
			ks[i] = pgtype.Text{String: f.EventID, Valid: true}
		}
		if src, err := ib.sources.id(ctx, ib, f.Queue); err == nil {
			srcs[i] = pgtype.Int4{Int32: src, Valid: true}
		}
		if f.ReceiveCount > 0 {
			counts[i] = pgtype.Int4{Int32: int32(min(f.ReceiveCount, 1<<31-1)), Valid: true}
		}
	}
	if _, err := ib.pool.Exec(ctx, ib.sql.recordFailures, hs, ks, ms, srcs, counts, es); err != nil {
		ib.failures.notRecorded.Add(int64(n))
		err = fmt.Errorf("inbox: recording %d failure(s) of handler %s: %w", n, fs[0].Handler, err)
		ib.cfg.Logger.WarnContext(ctx, "inbox: a failure was not recorded; the message's outcome is unchanged",
			"handler", fs[0].Handler, "message_id", fs[0].MessageID, "not_recorded_total", ib.failures.notRecorded.Load(), "error", err)
		return err
	}
	return nil
}

// Failures returns the recorded failures of the events keys and of the messages messageIDs
// (either list may be empty), the newest first.
func (ib *Inbox) Failures(ctx context.Context, keys, messageIDs []string) ([]Failure, error) {
	if len(keys) == 0 && len(messageIDs) == 0 {
		return nil, nil
	}
	q := `SELECT f.handler, f.event_id, f.message_id, src.queue, src.instance, f.receive_count, f.error, f.failed_at
FROM ` + sqlident.Quote(ib.cfg.Schema, "inbox_failures") + ` f
LEFT JOIN ` + sqlident.Quote(ib.cfg.Schema, "inbox_sources") + ` src ON src.id = f.source
WHERE f.event_id = ANY ($1::text[]) OR f.message_id = ANY ($2::text[])
ORDER BY f.id DESC`
	rows, err := ib.pool.Query(ctx, q, keys, messageIDs)
	if err != nil {
		return nil, lookupError(ib.cfg.Schema, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var (
			f                    Failure
			key, queue, instance pgtype.Text
			count                pgtype.Int4
		)
		err := row.Scan(&f.Handler, &key, &f.MessageID, &queue, &instance, &count, &f.Error, &f.FailedAt)
		f.EventID, f.Queue, f.Instance, f.ReceiveCount = key.String, queue.String, instance.String, int(count.Int32)
		return f, err
	})
	if err != nil {
		return nil, lookupError(ib.cfg.Schema, err)
	}
	return out, nil
}

// purgeFailures deletes the failure records older than age, by the database's clock, in
// batches as the rows' purge does.
func (ib *Inbox) purgeFailures(ctx context.Context, age time.Duration) (PurgeResult, error) {
	return pgpurge.Run(ctx, ib.pool, pgpurge.Target{
		Schema:    ib.cfg.Schema,
		Table:     "inbox_failures",
		Column:    "failed_at",
		Retention: age,
		BatchSize: ib.cfg.PurgeBatchSize,
		LockKey:   "sqsinbox.purge." + ib.cfg.Schema + ".inbox_failures",
	})
}

// Discard is an operator's deletion of a message from a dead-letter queue, recorded by
// [Inbox.RecordDiscard] before the message is deleted.
type Discard struct {
	// Queue is the dead-letter queue's name.
	Queue     string
	MessageID string
	// EventID is the message's key; empty when it has none.
	EventID string
	// Body is the message's body; only its SHA-256 is recorded.
	Body string
	// By is who discarded it, and Reason why: both required.
	By, Reason string
	// Forced is set when the operator overrode the refusal to discard an event no handler applied.
	Forced bool
}

// RecordDiscard records d and returns its id, for [Inbox.ForgetDiscard] should the deletion fail.
func (ib *Inbox) RecordDiscard(ctx context.Context, d Discard) (int64, error) {
	switch {
	case strings.TrimSpace(d.By) == "":
		return 0, fmt.Errorf("inbox: discard of message %s: Discard.By is empty: say who discards it", d.MessageID)
	case strings.TrimSpace(d.Reason) == "":
		return 0, fmt.Errorf("inbox: discard of message %s: Discard.Reason is empty: say why it is discarded", d.MessageID)
	}
	sum := sha256.Sum256([]byte(d.Body))
	var key pgtype.Text
	if d.EventID != "" {
		key = pgtype.Text{String: d.EventID, Valid: true}
	}
	var id int64
	err := ib.pool.QueryRow(ctx, "INSERT INTO "+sqlident.Quote(ib.cfg.Schema, "dlq_discards")+
		" (queue, message_id, event_id, body_sha256, discarded_by, reason, forced) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
		d.Queue, d.MessageID, key, sum[:], failureText(d.By), failureText(d.Reason), d.Forced).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("inbox: recording the discard of message %s: %w", d.MessageID, lookupError(ib.cfg.Schema, err))
	}
	return id, nil
}

// ForgetDiscard deletes the discard record id: the message it names could not be deleted.
func (ib *Inbox) ForgetDiscard(ctx context.Context, id int64) error {
	_, err := ib.pool.Exec(ctx, "DELETE FROM "+sqlident.Quote(ib.cfg.Schema, "dlq_discards")+" WHERE id = $1", id)
	return err
}

// DiscardRecord is a recorded [Discard], as [Inbox.Discards] returns it.
type DiscardRecord struct {
	Queue       string    `json:"queue"`
	MessageID   string    `json:"message_id"`
	EventID     string    `json:"event_id,omitempty"`
	BodySHA256  string    `json:"body_sha256"`
	By          string    `json:"by"`
	Reason      string    `json:"reason"`
	Forced      bool      `json:"forced"`
	DiscardedAt time.Time `json:"discarded_at"`
}

// Discards returns the recorded discards of the messages messageIDs, the newest first.
func (ib *Inbox) Discards(ctx context.Context, messageIDs []string) ([]DiscardRecord, error) {
	rows, err := ib.pool.Query(ctx, "SELECT queue, message_id, event_id, encode(body_sha256, 'hex'), discarded_by, reason, forced, discarded_at FROM "+
		sqlident.Quote(ib.cfg.Schema, "dlq_discards")+" WHERE message_id = ANY ($1::text[]) ORDER BY id DESC", messageIDs)
	if err != nil {
		return nil, lookupError(ib.cfg.Schema, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (DiscardRecord, error) {
		var d DiscardRecord
		var key pgtype.Text
		err := row.Scan(&d.Queue, &d.MessageID, &key, &d.BodySHA256, &d.By, &d.Reason, &d.Forced, &d.DiscardedAt)
		d.EventID = key.String
		return d, err
	})
}

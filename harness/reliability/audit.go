package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// Delete statuses in the delete log.
const (
	// DeleteCommitted: the inbox row of the message's key was committed when the delete was sent.
	DeleteCommitted = "committed"
	// DeleteMissing: it was not. A violation.
	DeleteMissing = "missing"
	// DeleteNoKey: the message has no valid key, so no inbox row can exist. A violation.
	DeleteNoKey = "nokey"
	// DeleteUnverified: the database could not be asked (it was down); the checker then requires
	// the row to exist at the end.
	DeleteUnverified = "unverified"
	// DeleteAfterUnknownCommit: the worker deletes a delivery whose commit it saw fail with an
	// unknown outcome, and which no later claim of the same delivery settled. A violation.
	DeleteAfterUnknownCommit = "after-unknown-commit"
	// DeleteUnknownHandle: the receipt handle was never seen on a receive. A violation.
	DeleteUnknownHandle = "unknown-handle"
	// Received is not a delete: the log also records each message received, to count
	// redeliveries.
	Received = "recv"
)

// DeleteRecord is one line of the delete log: one message the worker tried to delete.
type DeleteRecord struct {
	Worker string    `json:"w"`
	Seq    int64     `json:"seq"`
	Key    string    `json:"key,omitempty"`
	Status string    `json:"st"`
	At     time.Time `json:"at"`
	// SNS, on a Received record, says the message arrived in an SNS notification envelope.
	SNS bool `json:"sns,omitempty"`
}

type msgInfo struct {
	seq   int64
	key   string
	keyOK bool
	sns   bool
}

// Audit is the SQS client decorator that logs every delete a worker sends, with whether the
// message's inbox row had committed before it. The check is made on a connection of its own,
// directly to the database, under READ COMMITTED: a row it sees has committed. The worker's
// commit returned before it asked for the delete, so a correct worker always passes.
type Audit struct {
	Client
	pool    *pgxpool.Pool
	query   string
	id      string
	mu      sync.Mutex
	handles map[string]msgInfo
	unknown map[string]bool
	// settled: receipt handles whose delivery, after an unknown commit, was claimed again in
	// process and came to a known outcome (kept through an outage and run again).
	settled map[string]bool
	f       *os.File
	w       *bufio.Writer
	calls   *CallCounter
}

// NewAudit wraps next. The log goes to path (appended, flushed per delete call so that it
// survives SIGKILL).
func NewAudit(ctx context.Context, next Client, dbURL, schema, id, path string) (*Audit, error) {
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Audit{
		Client: next, pool: pool, id: id, handles: map[string]msgInfo{}, unknown: map[string]bool{}, settled: map[string]bool{},
		query: `SELECT event_id FROM ` + schema + `.processed_messages WHERE handler = $1 AND event_id = ANY($2)`,
		f:     f, w: bufio.NewWriter(f), calls: NewCallCounter(),
	}, nil
}

// Calls counts the calls the worker made, per operation and second.
func (a *Audit) Calls() *CallCounter { return a.calls }

// Close closes the log and the audit's pool.
func (a *Audit) Close() {
	a.mu.Lock()
	_ = a.w.Flush()
	_ = a.f.Close()
	a.mu.Unlock()
	a.pool.Close()
}

// MarkUnknownCommit records that the delivery with this receipt handle saw its commit fail with
// an unknown outcome: deleting it is a violation.
func (a *Audit) MarkUnknownCommit(handle string) {
	a.mu.Lock()
	a.unknown[handle] = true
	a.mu.Unlock()
}

// MarkSettled records that the delivery with this receipt handle was processed, or found a
// duplicate, by a claim of its own: after an unknown commit, that claim found the row or made it,
// so deleting it is no violation.
func (a *Audit) MarkSettled(handle string) {
	a.mu.Lock()
	if a.unknown[handle] {
		a.settled[handle] = true
	}
	a.mu.Unlock()
}

// UnknownCommits returns how many deliveries saw a commit with an unknown outcome.
func (a *Audit) UnknownCommits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.unknown)
}

// ReceiveMessage records which event each receipt handle belongs to.
func (a *Audit) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	a.calls.Add("ReceiveMessage")
	out, err := a.Client.ReceiveMessage(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	enc := json.NewEncoder(a.w)
	for _, m := range out.Messages {
		info := infoOf(m)
		a.handles[aws.ToString(m.ReceiptHandle)] = info
		_ = enc.Encode(DeleteRecord{Worker: a.id, Seq: info.seq, Status: Received, At: now, SNS: info.sns})
	}
	if len(out.Messages) > 0 {
		_ = a.w.Flush()
	}
	return out, nil
}

func infoOf(m types.Message) msgInfo {
	wm := &worker.Message{Body: []byte(aws.ToString(m.Body)), Attributes: m.MessageAttributes}
	var info msgInfo
	info.sns = worker.UnwrapSNS(wm, worker.SNSAuto) == nil && wm.SNS != nil
	if v, ok := wm.Attribute(AttrSeq); ok {
		info.seq, _ = strconv.ParseInt(v, 10, 64)
	}
	k, err := inboxhandler.DefaultKey(wm)
	info.key, info.keyOK = k, err == nil
	return info
}

// DeleteMessage audits, then forwards.
func (a *Audit) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	a.calls.Add("DeleteMessage")
	a.audit(ctx, []string{aws.ToString(in.ReceiptHandle)})
	return a.Client.DeleteMessage(ctx, in, optFns...)
}

// DeleteMessageBatch audits, then forwards.
func (a *Audit) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	a.calls.Add("DeleteMessageBatch")
	hs := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		hs[i] = aws.ToString(e.ReceiptHandle)
	}
	a.audit(ctx, hs)
	return a.Client.DeleteMessageBatch(ctx, in, optFns...)
}

// ChangeMessageVisibility counts, then forwards.
func (a *Audit) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	a.calls.Add("ChangeMessageVisibility")
	return a.Client.ChangeMessageVisibility(ctx, in, optFns...)
}

func (a *Audit) audit(ctx context.Context, handles []string) {
	recs := make([]DeleteRecord, len(handles))
	var keys []string
	now := time.Now()
	a.mu.Lock()
	for i, h := range handles {
		info, ok := a.handles[h]
		r := DeleteRecord{Worker: a.id, Seq: info.seq, Key: info.key, At: now}
		switch {
		case !ok:
			r.Status = DeleteUnknownHandle
		case a.unknown[h] && !a.settled[h]:
			r.Status = DeleteAfterUnknownCommit
		case !info.keyOK:
			r.Status = DeleteNoKey
		default:
			keys = append(keys, info.key)
		}
		recs[i] = r
	}
	a.mu.Unlock()
	present, err := a.committed(ctx, keys)
	for i := range recs {
		r := &recs[i]
		if r.Status != "" {
			continue
		}
		switch {
		case err != nil:
			r.Status = DeleteUnverified
		case present[r.Key]:
			r.Status = DeleteCommitted
		default:
			r.Status = DeleteMissing
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	enc := json.NewEncoder(a.w)
	for _, r := range recs {
		_ = enc.Encode(r)
	}
	_ = a.w.Flush() // to the kernel: survives SIGKILL of this process
}

func (a *Audit) committed(ctx context.Context, keys []string) (map[string]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	rows, err := a.pool.Query(ctx, a.query, HandlerName, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]bool, len(keys))
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadDeleteLogs reads every delete log in dir.
func ReadDeleteLogs(dir string) ([]DeleteRecord, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []DeleteRecord
	for _, e := range entries {
		if e.IsDir() || len(e.Name()) < 8 || e.Name()[:8] != "deletes-" {
			continue
		}
		f, err := os.Open(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			var r DeleteRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				// A process killed mid-write leaves a partial last line: it was never sent.
				continue
			}
			out = append(out, r)
		}
		err = errors.Join(sc.Err(), f.Close())
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CallCounter counts calls per operation and wall-clock second.
type CallCounter struct {
	mu sync.Mutex
	n  map[string]map[int64]int
}

// NewCallCounter returns an empty counter.
func NewCallCounter() *CallCounter { return &CallCounter{n: map[string]map[int64]int{}} }

// Add counts one call of op now.
func (c *CallCounter) Add(op string) {
	s := time.Now().Unix()
	c.mu.Lock()
	m := c.n[op]
	if m == nil {
		m = map[int64]int{}
		c.n[op] = m
	}
	m[s]++
	c.mu.Unlock()
}

// Count returns every call of op counted so far.
func (c *CallCounter) Count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n[op] {
		n += k
	}
	return n
}

// Total returns the calls of op (every op when op is empty) between from and to.
func (c *CallCounter) Total(op string, from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for o, m := range c.n {
		if op != "" && o != op {
			continue
		}
		for s, k := range m {
			if s >= from.Unix() && s <= to.Unix() {
				n += k
			}
		}
	}
	return n
}

// MaxPerSecond returns the most calls of op (every op when op is empty) in one second between
// from and to.
func (c *CallCounter) MaxPerSecond(op string, from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	per := map[int64]int{}
	for o, m := range c.n {
		if op != "" && o != op {
			continue
		}
		for s, k := range m {
			if s >= from.Unix() && s <= to.Unix() {
				per[s] += k
			}
		}
	}
	best := 0
	for _, k := range per {
		best = max(best, k)
	}
	return best
}

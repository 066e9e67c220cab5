package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// recordingHandler is the worker's handler in the harness: the inbox handler, which is a
// [worker.BatchHandler], so the worker batches as it does for a user (Config.HandlerBatch,
// default 10). It marks in the audit every delivery whose commit's outcome was unknown (deleting
// one is a violation), logs each batch when WorkerConfig.BatchLog is set, and, in
// ModeAckBeforeCommit, deletes every message before its transaction.
type recordingHandler struct {
	h     *inboxhandler.Handler
	audit *Audit
	cfg   WorkerConfig
	blog  *batchLog // nil: no log
	acks  atomic.Int64
}

func (r *recordingHandler) CheckQueue(ctx context.Context, q *worker.Queue) error {
	return r.h.CheckQueue(ctx, q)
}

// ackFirst is the broken worker's delete before the transaction; after the CrashAt-th, the
// process kills itself, before the commit.
func (r *recordingHandler) ackFirst(ctx context.Context, m *worker.Message) error {
	if _, err := r.audit.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.cfg.QueueURL), ReceiptHandle: aws.String(m.ReceiptHandle)}); err != nil {
		return err
	}
	if r.acks.Add(1) == int64(r.cfg.CrashAt) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return nil
}

// markOutcome tells the audit what the delivery with receipt handle h came to, as far as the
// delete check cares: a commit of unknown outcome, or (later, for a delivery the worker kept
// through an outage and ran again) a known one.
func (r *recordingHandler) markOutcome(h string, err error) {
	switch {
	case errors.Is(err, inbox.ErrCommitUnknown):
		r.audit.MarkUnknownCommit(h)
	case err == nil, errors.Is(err, worker.ErrDuplicate):
		r.audit.MarkSettled(h)
	}
}

func (r *recordingHandler) Handle(ctx context.Context, m *worker.Message) error {
	if r.cfg.Mode == ModeAckBeforeCommit {
		if err := r.ackFirst(ctx, m); err != nil {
			return err
		}
	}
	err := r.h.Handle(ctx, m)
	r.markOutcome(m.ReceiptHandle, err)
	return err
}

func (r *recordingHandler) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	if r.cfg.Mode == ModeAckBeforeCommit {
		for i := range b.Len() {
			if err := r.ackFirst(ctx, b.Message(i)); err != nil {
				res := make([]error, b.Len())
				for j := range res {
					res[j] = err
				}
				return res
			}
		}
	}
	id := r.blog.open(b)
	res := r.h.HandleBatch(ctx, b)
	for i, err := range res {
		r.markOutcome(b.Message(i).ReceiptHandle, err)
	}
	r.blog.close(id, res)
	return res
}

// BatchRecord is one line of a worker's batch log: a batch it opened (before its transaction
// began), or the results of one it closed (after its transaction ended, before any delete).
type BatchRecord struct {
	Worker string `json:"w"`
	Batch  int64  `json:"b"`
	// Open is true on the line written before the batch ran; Seqs, IDs and Keys are its messages'
	// sequence numbers, SQS message IDs and event keys (empty for a message without a valid key).
	Open bool     `json:"open,omitempty"`
	Seqs []int64  `json:"seqs,omitempty"`
	IDs  []string `json:"ids,omitempty"`
	Keys []string `json:"keys,omitempty"`
	// Results, on the closing line, is each message's result: "" for done (committed or a
	// duplicate), else its error. Kinds says what kind of result each was ([ResultKind]).
	Results []string  `json:"res,omitempty"`
	Kinds   []string  `json:"kinds,omitempty"`
	At      time.Time `json:"at"`
}

// batchLog appends BatchRecords to a file, flushed per line so that it survives SIGKILL.
type batchLog struct {
	worker string
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	n      int64
}

func batchLogPath(dir, worker string) string {
	return filepath.Join(dir, "batches-"+worker+".jsonl")
}

func newBatchLog(dir, worker string) (*batchLog, error) {
	f, err := os.OpenFile(batchLogPath(dir, worker), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &batchLog{worker: worker, f: f, w: bufio.NewWriter(f)}, nil
}

func (l *batchLog) write(rec BatchRecord) {
	rec.Worker, rec.At = l.worker, time.Now()
	_ = json.NewEncoder(l.w).Encode(rec)
	_ = l.w.Flush()
}

func (l *batchLog) open(b *worker.Batch) int64 {
	if l == nil {
		return 0
	}
	rec := BatchRecord{Open: true}
	for i := range b.Len() {
		m := b.Message(i)
		seq := int64(0)
		if v, ok := m.Attribute(AttrSeq); ok {
			seq, _ = strconv.ParseInt(v, 10, 64)
		}
		key, err := inboxhandler.DefaultKey(m)
		if err != nil {
			key = ""
		}
		rec.Seqs, rec.IDs, rec.Keys = append(rec.Seqs, seq), append(rec.IDs, m.ID), append(rec.Keys, key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	rec.Batch = l.n
	l.write(rec)
	return l.n
}

func (l *batchLog) close(id int64, res []error) {
	if l == nil {
		return
	}
	rec := BatchRecord{Batch: id, Results: make([]string, len(res)), Kinds: make([]string, len(res))}
	for i, err := range res {
		rec.Kinds[i] = ResultKind(err)
		if err != nil && !errors.Is(err, worker.ErrDuplicate) {
			rec.Results[i] = err.Error()
			if rec.Results[i] == "" {
				rec.Results[i] = "error"
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(rec)
}

func (l *batchLog) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.w.Flush()
	_ = l.f.Close()
}

// LoggedBatch is a batch of a worker's batch log: its opening line, and its closing line's
// results and their kinds (nil if the batch never closed: the process died while it ran).
type LoggedBatch struct {
	Worker  string
	Open    BatchRecord
	Results []string
	Kinds   []string
	Closed  bool
}

// ReadBatchLog reads the batch log of worker in dir.
func ReadBatchLog(dir, worker string) ([]LoggedBatch, error) {
	f, err := os.Open(batchLogPath(dir, worker))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []LoggedBatch
	at := map[int64]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var rec BatchRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue // a line cut by SIGKILL
		}
		if rec.Open {
			at[rec.Batch] = len(out)
			out = append(out, LoggedBatch{Worker: rec.Worker, Open: rec})
			continue
		}
		if i, ok := at[rec.Batch]; ok {
			out[i].Results, out[i].Kinds, out[i].Closed = rec.Results, rec.Kinds, true
		}
	}
	return out, sc.Err()
}

// ResultKind names the kind of a message's result in a batch (one of the Result constants): what
// the inbox's outcome table and the worker made of it. A transaction aborted by a failed
// statement carries that statement's SQLSTATE ("tx-aborted 22012").
func ResultKind(err error) string {
	var (
		aborted *inbox.TxAbortedError
		blocked *worker.BlockedError
		unavail *worker.UnavailableError
		broken  *worker.DeploymentError
	)
	switch {
	case err == nil:
		return ResultDone
	case errors.Is(err, worker.ErrDuplicate):
		return ResultDuplicate
	case errors.Is(err, worker.ErrNotRun):
		return ResultNotRun
	case errors.Is(err, inbox.ErrCommitUnknown):
		return ResultUnknown
	case errors.As(err, &broken):
		return ResultBroken
	case errors.As(err, &unavail):
		return ResultUnavailable
	case errors.As(err, &blocked):
		return ResultBlocked
	case errors.Is(err, worker.ErrHandlerTimeout), errors.Is(err, inbox.ErrTimeout):
		return ResultTimeout
	case errors.Is(err, inbox.ErrRowsOpen):
		return ResultRowsOpen
	case errors.Is(err, context.Canceled):
		return ResultCanceled
	case errors.Is(err, inbox.ErrItemRolledBack):
		return ResultRolledBack
	case errors.As(err, &aborted):
		if aborted.Err != nil {
			return ResultTxAborted + " " + aborted.Err.Code
		}
		return ResultTxAborted
	}
	return ResultError
}

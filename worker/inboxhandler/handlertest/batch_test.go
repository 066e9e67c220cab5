package handlertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler/handlertest"
)

// errFlaky is the failure of an event set to fail.
var errFlaky = errors.New("flaky")

// shop is a test's inbox handler and what its function did: each event's function writes an
// effect (with the id of the transaction that wrote it), then may do more (wait) and may be set
// to fail, after that write.
type shop struct {
	db *inboxtest.DB
	h  *inboxhandler.Handler

	mu   sync.Mutex
	ran  map[string]int                                 // event id -> function calls
	fail map[string]int                                 // event id -> calls left to fail
	wait map[string]func(context.Context, pgx.Tx) error // event id -> what its function does after its write
}

const effectsTable = `CREATE TABLE effects (event_id text NOT NULL, txid bigint NOT NULL DEFAULT txid_current())`

func newShop(t *testing.T, opts ...inboxtest.Option) *shop {
	t.Helper()
	s := &shop{db: inboxtest.New(t, append(opts, inboxtest.WithSQL(effectsTable))...),
		ran: map[string]int{}, fail: map[string]int{}, wait: map[string]func(context.Context, pgx.Tx) error{}}
	h, err := inboxhandler.New(s.db.Inbox, "shop", nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		id, _ := m.Attribute("event_id")
		s.mu.Lock()
		s.ran[id]++
		fail := s.fail[id] > 0
		if fail {
			s.fail[id]--
		}
		wait := s.wait[id]
		s.mu.Unlock()
		if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, id); err != nil {
			return err
		}
		if wait != nil {
			if err := wait(ctx, tx); err != nil {
				return err
			}
		}
		if fail {
			return errFlaky // after its write: the write must roll back
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.h = h
	return s
}

// msg is a message of event id (its event_id attribute) on FIFO group group, if not empty.
func msg(id, group string) *worker.Message {
	m := handlertest.Message(`{}`, "event_id", id)
	m.GroupID = group
	return m
}

func (s *shop) ranOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[id]
}

// effects returns the number of effects of each event, and the transaction ids that wrote them.
func (s *shop) effects(t *testing.T) (map[string]int, map[string][]int64) {
	t.Helper()
	rows, err := s.db.Pool.Query(t.Context(), `SELECT event_id, txid FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	n, tx := map[string]int{}, map[string][]int64{}
	for rows.Next() {
		var id string
		var x int64
		if err := rows.Scan(&id, &x); err != nil {
			t.Fatal(err)
		}
		n[id]++
		tx[id] = append(tx[id], x)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n, tx
}

func outcomes(o ...handlertest.Outcome) []handlertest.Outcome { return o }

// TestDeliverBatchRollsBackOnlyTheFailure delivers three events in one batch, the third failing
// once: the first two commit, in one transaction, and the third has no effect; the same batch
// again gives two duplicates and the third processed. It uses PostgreSQL (inboxtest); no SQS
// server.
func TestDeliverBatchRollsBackOnlyTheFailure(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.fail["evt_c"] = 1
	a, b, c := msg("evt_a", ""), msg("evt_b", ""), msg("evt_c", "")

	got := handlertest.DeliverBatch(t, s.h, a, b, c)
	if want := outcomes("processed", "processed", "failed"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Fatalf("first batch: %v, want %v", got, want)
	}
	if !errors.Is(got[2].Err, errFlaky) {
		t.Errorf("the failure's error is %v, want the function's", got[2].Err)
	}
	n, txids := s.effects(t)
	if n["evt_a"] != 1 || n["evt_b"] != 1 || n["evt_c"] != 0 {
		t.Errorf("effects after the first batch: %v, want evt_a and evt_b once, evt_c none", n)
	}
	if txids["evt_a"][0] != txids["evt_b"][0] {
		t.Errorf("evt_a and evt_b were written by transactions %v and %v: not one batch", txids["evt_a"], txids["evt_b"])
	}

	got = handlertest.DeliverBatch(t, s.h, a, b, c)
	if want := outcomes("duplicate", "duplicate", "processed"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Fatalf("second batch: %v, want %v", got, want)
	}
	n, _ = s.effects(t)
	if n["evt_a"] != 1 || n["evt_b"] != 1 || n["evt_c"] != 1 {
		t.Errorf("effects after the second batch: %v, want one of each", n)
	}
	if s.ranOf("evt_a") != 1 || s.ranOf("evt_c") != 2 {
		t.Errorf("the function ran %d times for evt_a and %d for evt_c, want 1 and 2", s.ranOf("evt_a"), s.ranOf("evt_c"))
	}
}

// TestDeliverBatchSameEventTwice delivers one event twice in one batch: it runs once. It uses
// PostgreSQL (inboxtest); no SQS server.
func TestDeliverBatchSameEventTwice(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	m := msg("evt_twice", "")
	got := handlertest.DeliverBatch(t, s.h, m, m)
	if want := outcomes("processed", "duplicate"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if n, _ := s.effects(t); n["evt_twice"] != 1 || s.ranOf("evt_twice") != 1 {
		t.Errorf("%d effects and %d calls, want 1 and 1", n["evt_twice"], s.ranOf("evt_twice"))
	}
}

// TestDeliverConcurrentlyOneEffect delivers the same event in four batches at once (four pods),
// each batch with an event of its own beside it. The function of the batch that claimed the
// shared event waits until the three others are blocked behind its claim in the database, so
// the four really meet there; the inbox's LockTimeout (1 min) outlasts that wait, so the three
// are duplicates, never Blocked. It uses PostgreSQL (inboxtest); no SQS server.
func TestDeliverConcurrentlyOneEffect(t *testing.T) {
	t.Parallel()
	// The holder's transaction sits idle while its function polls: the server must not end it.
	s := newShop(t, inboxtest.WithInboxConfig(&inbox.Config{LockTimeout: time.Minute, IdleInTransactionTimeout: 2 * time.Minute}))
	const pods = 4
	// The poll runs on a connection of its own: the pool's are the batches'.
	cc := s.db.Pool.Config().ConnConfig.Copy()
	s.wait["evt_shared"] = func(ctx context.Context, tx pgx.Tx) error {
		var holder int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
			return err
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		var waiting int
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`,
				holder).Scan(&waiting); err != nil {
				return err
			}
			if waiting == pods-1 {
				return nil
			}
		}
		return fmt.Errorf("after a minute, %d batches wait for the claim, want %d", waiting, pods-1)
	}
	batches := make([][]*worker.Message, pods)
	for i := range batches {
		batches[i] = []*worker.Message{msg("evt_shared", ""), msg(fmt.Sprintf("evt_own_%d", i), "")}
	}

	got := handlertest.DeliverConcurrently(t, s.h, batches...)
	shared := map[handlertest.Outcome]int{}
	for i, b := range got {
		if len(b) != 2 {
			t.Fatalf("batch %d: %d results for 2 messages", i, len(b))
		}
		shared[b[0].Outcome]++
		if b[1].Outcome != handlertest.Processed {
			t.Errorf("batch %d: its own event %v, want processed", i, b[1])
		}
		if b[0].Outcome != handlertest.Processed && b[0].Outcome != handlertest.Duplicate {
			t.Errorf("batch %d: the shared event %v (%v)", i, b[0].Outcome, b[0].Err)
		}
	}
	if shared[handlertest.Processed] != 1 || shared[handlertest.Duplicate] != pods-1 {
		t.Errorf("the shared event: %v, want 1 processed and %d duplicates", shared, pods-1)
	}
	n, _ := s.effects(t)
	if n["evt_shared"] != 1 || s.ranOf("evt_shared") != 1 {
		t.Errorf("the shared event: %d effects, %d calls; want 1 and 1", n["evt_shared"], s.ranOf("evt_shared"))
	}
	for i := range pods {
		if id := fmt.Sprintf("evt_own_%d", i); n[id] != 1 {
			t.Errorf("%s: %d effects, want 1", id, n[id])
		}
	}
}

// TestDeliverBatchFIFO delivers a batch of two FIFO groups in which the second message of group
// g1 fails: the third of g1 is not run (released, as the worker makes it visible again at once),
// and g2's messages, before and after, are processed. Redelivered, g1's rest runs. It uses
// PostgreSQL (inboxtest); no SQS server.
func TestDeliverBatchFIFO(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.fail["g1_b"] = 1
	g1a, g2a, g1b, g1c, g2b := msg("g1_a", "g1"), msg("g2_a", "g2"), msg("g1_b", "g1"), msg("g1_c", "g1"), msg("g2_b", "g2")

	got := handlertest.DeliverBatch(t, s.h, g1a, g2a, g1b, g1c, g2b)
	if want := outcomes("processed", "processed", "failed", "released", "processed"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if !errors.Is(got[3].Err, worker.ErrNotRun) {
		t.Errorf("the released message's error is %v, want worker.ErrNotRun", got[3].Err)
	}
	n, _ := s.effects(t)
	if s.ranOf("g1_c") != 0 || n["g1_b"] != 0 || n["g1_c"] != 0 || n["g1_a"] != 1 || n["g2_a"] != 1 || n["g2_b"] != 1 {
		t.Errorf("effects %v, g1_c's function ran %d times; want g1_a, g2_a and g2_b once, nothing of g1_b and g1_c",
			n, s.ranOf("g1_c"))
	}

	got = handlertest.DeliverBatch(t, s.h, g1b, g1c)
	if want := outcomes("processed", "processed"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Errorf("g1's rest redelivered: %v, want %v", got, want)
	}
}

// both implements worker.BatchHandler and records which of its methods the kit called and the
// deliveries it saw.
type both struct {
	handled, batched atomic.Int32
	mu               sync.Mutex
	seen             []*worker.Message
}

func (h *both) Handle(_ context.Context, m *worker.Message) error {
	h.handled.Add(1)
	h.see(m)
	return nil
}

func (h *both) HandleBatch(_ context.Context, b *worker.Batch) []error {
	h.batched.Add(1)
	res := make([]error, b.Len())
	for i := range res {
		res[i] = b.Run(b.Context(i), i, func(context.Context) error { h.see(b.Message(i)); return nil })
	}
	return res
}

func (h *both) see(m *worker.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, m)
}

// batchSpy is the inbox handler, counting its HandleBatch calls.
type batchSpy struct {
	*inboxhandler.Handler
	batches atomic.Int32
}

func (s *batchSpy) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	s.batches.Add(1)
	return s.Handler.HandleBatch(ctx, b)
}

// TestDeliverTakesTheWorkersPath: Deliver runs a BatchHandler through HandleBatch, a batch of one
// per delivery (the worker's default path), and a plain Handler through Handle, each delivery
// with a fresh receipt handle and the next receive count; DeliverBatch of one message on a plain
// Handler calls Handle. The inbox handler too is run through HandleBatch. It uses PostgreSQL
// (inboxtest) for the inbox handler; no SQS server.
func TestDeliverTakesTheWorkersPath(t *testing.T) {
	t.Parallel()
	var bh both
	m := msg("evt_path", "")
	if got := handlertest.Outcomes(handlertest.Deliver(t, &bh, m, 3)); !slices.Equal(got, outcomes("processed", "processed", "processed")) {
		t.Errorf("a BatchHandler: %v", got)
	}
	if bh.batched.Load() != 3 || bh.handled.Load() != 0 {
		t.Errorf("a BatchHandler: %d HandleBatch and %d Handle calls, want 3 and 0", bh.batched.Load(), bh.handled.Load())
	}
	handles := map[string]bool{}
	for i, d := range bh.seen {
		if d.ReceiveCount != i+1 || d.ReceiptHandle == "" || handles[d.ReceiptHandle] || d.ID != m.ID {
			t.Errorf("delivery %d: id %s, receive count %d, receipt handle %q", i+1, d.ID, d.ReceiveCount, d.ReceiptHandle)
		}
		handles[d.ReceiptHandle] = true
	}

	var plain atomic.Int32
	ph := worker.HandlerFunc(func(context.Context, *worker.Message) error { plain.Add(1); return nil })
	handlertest.Deliver(t, ph, m, 2)
	handlertest.DeliverBatch(t, ph, m)
	if plain.Load() != 3 {
		t.Errorf("a plain Handler: %d Handle calls, want 3", plain.Load())
	}

	s := newShop(t)
	spy := &batchSpy{Handler: s.h}
	if got := handlertest.Outcomes(handlertest.Deliver(t, spy, m, 2)); !slices.Equal(got, outcomes("processed", "duplicate")) {
		t.Errorf("the inbox handler: %v", got)
	}
	if spy.batches.Load() != 2 {
		t.Errorf("the inbox handler: %d HandleBatch calls for 2 deliveries, want 2", spy.batches.Load())
	}
}

// TestDeliverConcurrentlyStartsTogether: the batches run at once (each handler call waits for the
// others to have started), on a plain Handler as batches of one. No server.
func TestDeliverConcurrentlyStartsTogether(t *testing.T) {
	t.Parallel()
	const n = 3
	var (
		mu      sync.Mutex
		started int
		all     = make(chan struct{})
	)
	h := worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error {
		mu.Lock()
		if started++; started == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(time.Minute):
			return errors.New("the other batches did not run alongside this one")
		}
	})
	m := msg("evt_together", "")
	got := handlertest.DeliverConcurrently(t, h, []*worker.Message{m}, []*worker.Message{m}, []*worker.Message{m})
	for i, b := range got {
		if len(b) != 1 || b[0].Outcome != handlertest.Processed {
			t.Errorf("batch %d: %v", i, b)
		}
	}
}

// TestHandlerTimeout: each message's work is bounded by the worker's default handler timeout,
// or by Config.HandlerTimeout (negative: none), on both paths; past it, the delivery is Failed with
// worker.ErrHandlerTimeout. It uses PostgreSQL (inboxtest) for the inbox handler; no SQS server.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	deadline := func(ctx context.Context) error {
		dl, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		return fmt.Errorf("deadline in %v", time.Until(dl).Round(time.Minute))
	}
	for name, h := range map[string]worker.Handler{
		"Handle":      worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error { return deadline(ctx) }),
		"HandleBatch": batchFunc(func(ctx context.Context) error { return deadline(ctx) }),
	} {
		m := msg("evt_deadline", "")
		if d := handlertest.Deliver(t, h, m, 1)[0]; d.Err == nil || d.Err.Error() != "deadline in 5m0s" {
			t.Errorf("%s, default: %v, want the worker's default (5 min)", name, d.Err)
		}
		if d := (handlertest.Config{HandlerTimeout: -1}).Deliver(t, h, m, 1)[0]; d.Err == nil || d.Err.Error() != "no deadline" {
			t.Errorf("%s, negative: %v, want no deadline", name, d.Err)
		}
	}

	s := newShop(t)
	s.wait["evt_slow"] = func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
		return err
	}
	slow := handlertest.Config{HandlerTimeout: 200 * time.Millisecond}
	if d := slow.Deliver(t, s.h, msg("evt_slow", ""), 1)[0]; d.Outcome != handlertest.Failed || !errors.Is(d.Err, worker.ErrHandlerTimeout) {
		t.Errorf("the inbox handler past its timeout: %v, want failed with worker.ErrHandlerTimeout", d)
	}
	waits := worker.HandlerFunc(func(ctx context.Context, _ *worker.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if d := slow.Deliver(t, waits, msg("evt_slow", ""), 1)[0]; d.Outcome != handlertest.Failed || !errors.Is(d.Err, worker.ErrHandlerTimeout) {
		t.Errorf("a plain Handler past its timeout: %v, want failed with worker.ErrHandlerTimeout", d)
	}
}

// batchFunc is a BatchHandler that runs fn for each message through Batch.Run.
type batchFunc func(ctx context.Context) error

func (f batchFunc) Handle(context.Context, *worker.Message) error { return errors.New("Handle called") }

func (f batchFunc) HandleBatch(_ context.Context, b *worker.Batch) []error {
	res := make([]error, b.Len())
	for i := range res {
		res[i] = b.Run(b.Context(i), i, func(ctx context.Context) error { return f(ctx) })
	}
	return res
}

// TestDeliverBatchBrokenDeployment delivers a batch whose middle message meets a missing table:
// it is a broken deployment (the worker pauses), the batch stops, nothing of it commits, and the
// others are released unfailed. It uses PostgreSQL (inboxtest); no SQS server.
func TestDeliverBatchBrokenDeployment(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.wait["evt_broken"] = func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`)
		return err
	}
	got := handlertest.DeliverBatch(t, s.h, msg("evt_a", ""), msg("evt_broken", ""), msg("evt_c", ""))
	if want := outcomes("released", "broken_deployment", "released"); !slices.Equal(handlertest.Outcomes(got), want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if n, _ := s.effects(t); len(n) != 0 {
		t.Errorf("effects %v, want none", n)
	}
}

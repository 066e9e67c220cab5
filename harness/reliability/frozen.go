package reliability

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// frozenInbox is the inbox configuration of a frozen-claim-holder run.
type frozenInbox struct {
	// lock and idle are the inbox's LockTimeout and IdleInTransactionTimeout.
	lock, idle time.Duration
	// control says the run is the control without the fix: it must fail.
	control bool
}

func runFrozenClaimHolder(ctx context.Context, e *Env, s Size) (*Report, error) {
	// The idle timeout is longer than the redelivery to the other worker (the visibility
	// timeout, plus GoAws's 1 s tick, plus the lock wait), so that the redelivery meets the
	// frozen claim and is counted as blocked, instead of finding it already ended.
	return runFrozen(ctx, e, s, "frozen-claim-holder", frozenInbox{lock: 500 * time.Millisecond, idle: 5 * time.Second})
}

func runFrozenControl(ctx context.Context, e *Env, s Size) (*Report, error) {
	// The inbox as it was before its two timeouts: the server never ends the frozen session, and
	// a claim waits for the holder until the handler's timeout.
	return runFrozen(ctx, e, s, "control-frozen-no-timeouts", frozenInbox{lock: time.Hour, idle: time.Hour, control: true})
}

// runFrozen SIGSTOPs a worker process while it holds inbox claims (its transactions idle after
// the claim, uncommitted), keeps it stopped for longer than maxReceiveCount × the visibility
// timeout and until every event is effected or in the DLQ, then SIGCONTs it. The other worker
// processes start once it is stopped, and are fast: they have drained the rest of the queue when
// the held messages come back, so that they receive them while the claims are still held, on a
// server that redelivers ahead of the backlog (GoAws) as on one that puts them behind it. They
// must apply each event once, and none may reach the DLQ.
func runFrozen(ctx context.Context, e *Env, s Size, name string, ib frozenInbox) (*Report, error) {
	const (
		vis        = 2 * time.Second
		maxReceive = 3
		// slow is the stopped process's pause in every transaction after the claim: the stop
		// lands in it. It is shorter than the handler timeout and than the idle timeout.
		slow = 800 * time.Millisecond
		// handlerTimeout scales the worker's default (5 min) down as vis scales SQS's 30 s:
		// before the inbox bounded its lock wait, it was what ended a claim blocked behind a
		// frozen holder.
		handlerTimeout = 1500 * time.Millisecond
		minStop        = maxReceive*vis + 2*time.Second
	)
	r, err := e.NewRun(ctx, name, RunOptions{Size: s, Visibility: vis, MaxReceive: maxReceive})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r}
	n := min(s.Messages, 200)
	if err := prod.Send(ctx, GoodEvents("frozen", n), 0); err != nil {
		return nil, err
	}
	config := func(id string) (WorkerConfig, error) {
		c := r.WorkerConfig(id)
		var err error
		if c.DatabaseURL, err = withApplicationName(r.DBURL, r.Schema+"-"+id); err != nil { // its sessions in pg_stat_activity
			return c, err
		}
		c.Concurrency, c.HandlerTimeout, c.Backoff = 4, handlerTimeout, 200*time.Millisecond
		c.LockTimeout, c.IdleInTransactionTimeout = ib.lock, ib.idle
		if ib.control {
			// The inbox as it was before its timeouts was also before batches. A batch's claim
			// statement runs outside every message's handler timeout: without LockTimeout, the
			// other process's batches would wait for the frozen holder until it is SIGCONTed,
			// and the held events would be neither applied nor dead-lettered.
			c.HandlerBatch = 1
		}
		return c, nil
	}
	c, err := config("w0")
	if err != nil {
		return nil, err
	}
	c.SlowDelay = slow
	frozen, err := r.StartProc(c)
	if err != nil {
		return nil, err
	}
	app := r.Schema + "-" + frozen.ID
	held, err := r.stopWhileHolding(ctx, frozen, app, frozen.Cfg.Concurrency, time.Minute)
	if err != nil {
		return nil, err
	}
	stopped := time.Now()
	procs := []*Proc{frozen}
	for i := 1; i < max(2, s.Workers); i++ {
		c, err := config(fmt.Sprintf("w%d", i))
		if err != nil {
			return nil, err
		}
		p, err := r.StartProc(c)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	var checks, notes []string
	// Stopped until minStop has passed and every event is effected or in the DLQ.
	var ended time.Duration // when the server ended the frozen sessions, if it did
	for {
		if ended == 0 {
			if h, err := r.heldClaims(ctx, app); err == nil && h == 0 {
				ended = time.Since(stopped)
			}
		}
		done, derr := r.Effects(ctx)
		dlq, cerr := r.Count(ctx, r.Queue.DLQURL)
		if derr == nil && cerr == nil && time.Since(stopped) >= minStop && done+dlq >= n {
			break
		}
		if time.Since(stopped) > time.Minute {
			checks = append(checks, fmt.Sprintf("a minute after the stop, %d of %d events were effected and %d messages were in the DLQ", done, n, dlq))
			break
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			_ = frozen.Signal(syscall.SIGCONT)
			return nil, err
		}
	}
	frozenFor := time.Since(stopped)
	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	if ended > 0 {
		notes = append(notes, fmt.Sprintf("the stopped process held %d claims; the server ended its sessions %.1f s after the stop (IdleInTransactionTimeout %v)",
			held, ended.Seconds(), ib.idle))
	} else {
		notes = append(notes, fmt.Sprintf("the stopped process held %d claims, still held when it was SIGCONTed", held))
	}
	notes = append(notes, fmt.Sprintf("SIGSTOP for %.1f s (maxReceiveCount %d × visibility %v = %v); inbox LockTimeout %v, IdleInTransactionTimeout %v; handler timeout %v",
		frozenFor.Seconds(), maxReceive, vis, maxReceive*vis, ib.lock, ib.idle, handlerTimeout))
	for _, p := range procs {
		if ok, err := p.Exited(); ok {
			checks = append(checks, fmt.Sprintf("worker %s exited: %v: %s", p.ID, err, tail(p.Output(), 1500)))
		}
	}
	checks = append(checks, r.termAll(time.Minute)...)
	blocked := 0
	for _, p := range procs {
		c, ok := p.Counters()
		if !ok {
			checks = append(checks, fmt.Sprintf("worker %s wrote no counters", p.ID))
			continue
		}
		blocked += c[worker.Blocked]
		notes = append(notes, fmt.Sprintf("worker %s: %d received, %d processed, %d duplicates, %d blocked, %d failed, %d delete failures",
			p.ID, c[worker.Received], c[worker.Processed], c[worker.Duplicates], c[worker.Blocked], c[worker.Failed], c[worker.DeleteFailures]))
	}
	if !ib.control && blocked == 0 {
		checks = append(checks, "no claim was blocked: the redeliveries did not meet the frozen holder's claims")
	}
	rep, err := r.finish(ctx, prod, len(procs), checks, notes)
	if err == nil && rep.GoodInDLQ > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages reached the DLQ (%d of them unapplied)",
			rep.GoodInDLQ, rep.GoodInDLQ-rep.ProcessedInDLQ))
	}
	return requireRedelivery(rep, err)
}

// stopWhileHolding SIGSTOPs p while its inbox transactions hold want claims, and returns how
// many it holds once stopped. It polls the sessions named app until want of them are idle in a
// transaction that has written (the claim's row), stops p, and counts again; if every claim
// committed in between, it lets p run again and retries.
func (r *Run) stopWhileHolding(ctx context.Context, p *Proc, app string, want int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := r.heldClaims(ctx, app)
		if err != nil {
			return 0, err
		}
		if n >= want {
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				return 0, err
			}
			if n, err = r.heldClaims(ctx, app); err != nil || n > 0 {
				return n, err
			}
			if err := p.Signal(syscall.SIGCONT); err != nil {
				return 0, err
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("reliability: worker %s did not hold %d claims at once within %v: %s", p.ID, want, timeout, tail(p.Output(), 1500))
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// heldClaims counts the sessions named app that are idle in a transaction that has written: an
// inbox claim, uncommitted, while the handler pauses.
func (r *Run) heldClaims(ctx context.Context, app string) (int, error) {
	var n int
	err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`, app).Scan(&n)
	return n, err
}

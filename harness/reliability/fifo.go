package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// fifoGroups is the number of message groups of a FIFO run of size s: 8, or one per 50 events
// at larger sizes, so that a group holds a few dozen events whatever the size.
func fifoGroups(s Size) int { return max(8, s.Messages/50) }

// skipGoAwsFIFO says why the FIFO scenarios cannot run on GoAws.
func skipGoAwsFIFO(e *Env) string {
	if e.SQS != nil && e.SQS.Kind == sqstest.KindGoAws {
		return "GoAws's FIFO queues are broken (order across message groups, content-based deduplication ignored, " +
			"a group locked for good after ChangeMessageVisibility to 0): this scenario runs on fauxqs (SQSINBOX_TEST_SQS=fauxqs) or a real SQS"
	}
	return ""
}

// runFIFOSigkill is the sigkill scenario on a FIFO queue: events in several message groups,
// worker processes SIGKILLed while they hold an open inbox transaction, and restarted. Besides
// the invariant, the effects of each group must have committed in the order their events were
// sent (each effect row takes the next number of its group's counter in its transaction).
func runFIFOSigkill(ctx context.Context, e *Env, s Size) (*Report, error) {
	return runFIFO(ctx, e, s, "fifo-sigkill", false)
}

// runFIFOControl runs workers that delete each message before its transaction (and are never
// killed) on a FIFO queue: the next message of a group is then received while the one before
// it still runs, and commits before it. The checker must report effects out of send order.
func runFIFOControl(ctx context.Context, e *Env, s Size) (*Report, error) {
	return runFIFO(ctx, e, Size{Messages: min(s.Messages, 80), Workers: 2}, "control-fifo-ack-before-commit", true)
}

func runFIFO(ctx context.Context, e *Env, s Size, name string, control bool) (*Report, error) {
	if why := skipGoAwsFIFO(e); why != "" {
		return nil, errors.New("reliability: " + why)
	}
	const vis = 3 * time.Second
	r, err := e.NewRun(ctx, name, RunOptions{Size: s, Visibility: vis, MaxReceive: 20, FIFO: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	groups := fifoGroups(s)
	if control {
		groups = 4
	}
	evs := FIFOEvents("fifo", s.Messages, groups)
	// Every tenth event again, at the end of its group, with a new deduplication ID: a producer
	// that retried after the queue's 5-minute window. The inbox must end it as a duplicate.
	for i := 0; i < s.Messages; i += 10 {
		c := evs[i]
		c.Dedup = c.Key + "#resend"
		evs = append(evs, c)
	}
	// One batch at a time, one event of each group per batch, each retried before the next
	// batch: the queue accepts each group's events in the order of evs (Producer.Send).
	prod := &Producer{Run: r, Retries: 4, Parallel: 1, Batch: min(10, groups)}
	workers := max(2, s.Workers)
	cfgs := make([]WorkerConfig, workers)
	procs := make([]*Proc, workers)
	apps := make([]string, workers)
	start := func(i int, id string) error {
		c := cfgs[i]
		c.ID = id
		apps[i] = r.Schema + "-" + id // its sessions in pg_stat_activity
		var err error
		if c.DatabaseURL, err = withApplicationName(r.DBURL, apps[i]); err != nil {
			return err
		}
		procs[i], err = r.StartProc(c)
		return err
	}
	for i := range cfgs {
		cfgs[i] = r.WorkerConfig("")
		// A pause after the claim: a process with work holds an open transaction most of the
		// time, and the kill waits for one.
		cfgs[i].JitterDelay = 200 * time.Millisecond
		if control {
			cfgs[i].Mode = ModeAckBeforeCommit // CrashAt 0: it never kills itself
			// One message per transaction and no prefetch, as the control was written: batched,
			// its early acks lose whole batches at a kill, and the run never reaches its effects.
			cfgs[i].HandlerBatch, cfgs[i].Prefetch = 1, -1
		}
		if err := start(i, fmt.Sprintf("w%d", i)); err != nil {
			return nil, err
		}
	}
	sent := sendAsync(ctx, prod, evs, s.Spread)
	// Kill while the producer sends and after it, while messages remain, up to 3 kills per
	// worker; each kill waits for its process to hold an open inbox transaction.
	kills, claims, gen := 0, 0, 0
	var sendErr error
	producing := true
	for !control && kills < 3*workers {
		// A random spacing between kills, not a wait for anything.
		if err := sleep(ctx, time.Duration(300+rand.IntN(1200))*time.Millisecond); err != nil {
			return nil, err
		}
		if producing {
			select {
			case sendErr = <-sent:
				producing = false
			default:
			}
		}
		if !producing {
			if n, err := r.Count(ctx, r.Queue.URL); err == nil && n == 0 {
				break // nothing left to kill in the middle of: the drain does the rest
			}
		}
		// Any process may be the one holding work: FIFO receives can hand every group to one of
		// them, and a kill that waited on a process picked at random missed the run's whole
		// processing window when it kept picking idle ones.
		i, held, err := r.waitHolding(ctx, apps, 5*time.Second)
		if err != nil {
			return nil, err
		}
		if held == 0 {
			continue // every group is idle: try another moment
		}
		procs[i].Kill()
		kills++
		claims += held
		gen++
		if err := start(i, fmt.Sprintf("w%d.%d", i, gen)); err != nil {
			return nil, err
		}
	}
	if producing {
		sendErr = <-sent
	}
	if sendErr != nil {
		return nil, sendErr
	}
	if control {
		if err := r.WaitEffects(ctx, s.Messages, s.Wait()); err != nil {
			return nil, err
		}
		return r.finish(ctx, prod, workers, r.termAll(time.Minute),
			[]string{fmt.Sprintf("%d message groups of %d events; every message deleted before its transaction", groups, s.Messages/groups)})
	}
	notes := []string{fmt.Sprintf("%d message groups of %d events (and every tenth again with a new deduplication ID); "+
		"%d SIGKILLs, each as soon as the process was seen holding an open inbox transaction (%d such transactions seen)",
		groups, s.Messages/groups, kills, claims)}
	var checks []string
	if kills == 0 {
		checks = append(checks, "no kill: no worker process was found holding an open inbox transaction")
	}
	checks = append(checks, r.termAll(time.Minute)...)
	rep, err := r.finish(ctx, prod, workers, checks, notes)
	if err == nil {
		if rep.Groups != groups {
			rep.Checks = append(rep.Checks, fmt.Sprintf("effects in %d message groups, want %d", rep.Groups, groups))
		}
		if rep.GoodInDLQ > 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages in the DLQ (maxReceiveCount 20): their groups' order was given up", rep.GoodInDLQ))
		}
	}
	return requireRedelivery(rep, err)
}

// withApplicationName returns dbURL with its sessions named app in pg_stat_activity.
func withApplicationName(dbURL, app string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// waitHolding waits up to timeout for any of the sessions named in apps to hold an open inbox
// transaction (see [Run.heldClaims]), and returns the index of one that does, picked at random
// among them, and how many its sessions hold: 0 if none did in time.
func (r *Run) waitHolding(ctx context.Context, apps []string, timeout time.Duration) (int, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		holding, counts := []int(nil), make([]int, len(apps))
		for i, app := range apps {
			n, err := r.heldClaims(ctx, app)
			if err != nil {
				return 0, 0, err
			}
			if counts[i] = n; n > 0 {
				holding = append(holding, i)
			}
		}
		if len(holding) > 0 {
			i := holding[rand.IntN(len(holding))]
			return i, counts[i], nil
		}
		if time.Now().After(deadline) {
			return 0, 0, nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
}

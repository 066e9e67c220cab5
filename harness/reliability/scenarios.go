package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Size scales a scenario.
type Size struct {
	// Messages is the number of good events.
	Messages int
	// Workers is the number of workers (processes, or in-process workers where the fault is not
	// about processes).
	Workers int
	// Spread is how long the producer takes to send them (0: at once).
	Spread time.Duration
}

// Wait is how long a scenario of this size waits for progress before it gives up: 3 minutes,
// plus 10 ms per message.
func (s Size) Wait() time.Duration {
	return 3*time.Minute + time.Duration(s.Messages)*10*time.Millisecond
}

// Scenario is one fault, run at a given size.
type Scenario struct {
	// Name is short and stable (a test name and a table row).
	Name string
	// Fault is the number of the fault in issue 7 (0 for the checker's control run); 11 is the
	// misbehaving handlers, which came later.
	Fault int
	// Doc says what the scenario does.
	Doc string
	// ExpectFail is true for the control run of a broken worker: the checker must flag it.
	ExpectFail bool
	// Skip, if set, says why the scenario cannot run against e's servers ("" when it can). The
	// tests skip it with that reason, the soak command reports it.
	Skip func(e *Env) string
	Run  func(ctx context.Context, e *Env, s Size) (*Report, error)
}

// Scenarios lists every scenario, in fault order, then the batch scenarios (scenarios_batch.go).
func Scenarios() []Scenario {
	return append([]Scenario{
		{Name: "control-ack-before-commit", Fault: 0, ExpectFail: true, Run: runAckBeforeCommit,
			Doc: "a deliberately broken worker deletes before it commits and is killed in between: the checker must report lost messages and deletes without a committed row"},
		{Name: "sigkill", Fault: 1, Run: runSigkill,
			Doc: "worker processes SIGKILLed at random points, repeatedly, and restarted"},
		{Name: "sigkill-sns", Fault: 1, Skip: skipNoSNS, Run: runSigkillSNS,
			Doc: "the same with the events published to an SNS topic whose subscription delivers them in envelopes, which the worker unwraps (not on GoAws)"},
		{Name: "sigkill-offloaded", Fault: 1, Skip: skipNoS3, Run: runSigkillOffloaded,
			Doc: "the same with every fifth event's payload (300 KiB) offloaded to S3 and fetched by the worker before its handler; each must be applied once with its payload (not on GoAws, which has no S3)"},
		{Name: "fifo-sigkill", Fault: 1, Skip: skipGoAwsFIFO, Run: runFIFOSigkill,
			Doc: "the same on a FIFO queue with several message groups, each kill while the process holds an open inbox transaction: each group's effects must commit in send order (not on GoAws)"},
		{Name: "control-fifo-ack-before-commit", Fault: 1, ExpectFail: true, Skip: skipGoAwsFIFO, Run: runFIFOControl,
			Doc: "workers that delete each FIFO message before its transaction: the checker must report effects committed out of send order (not on GoAws)"},
		{Name: "relay-sigkill", Fault: 1, Skip: skipNoRelay, Run: runRelaySigkill,
			Doc: "outbox relay processes SIGKILLed at random and right after a publish (before its mark) while producers write events through outbox.Add, some rolled back; consumers apply them through the inbox (not on GoAws)"},
		{Name: "control-relay-stamp-before-publish", Fault: 1, ExpectFail: true, Skip: skipNoRelay, Run: runRelayStampBeforePublish,
			Doc: "a deliberately broken relay marks rows sent before it publishes them and is killed in between: the checker must report the events lost (not on GoAws)"},
		{Name: "sigstop", Fault: 2, Run: runSigstop,
			Doc: "a worker process SIGSTOPped for longer than the visibility timeout, then SIGCONTed"},
		{Name: "frozen-claim-holder", Fault: 2, Run: runFrozenClaimHolder,
			Doc: "a worker process SIGSTOPped while it holds inbox claims, for longer than maxReceiveCount (3) × the visibility timeout: another process applies each event once, none reaches the DLQ"},
		{Name: "control-frozen-no-timeouts", Fault: 2, ExpectFail: true, Run: runFrozenControl,
			Doc: "the same with the inbox's LockTimeout and IdleInTransactionTimeout effectively off (1 h), as before they existed: the held events must reach the DLQ"},
		{Name: "postgres-restart", Fault: 3, Run: runPostgresRestart,
			Doc: "PostgreSQL stopped with -m immediate and with -m fast mid-run, and started again"},
		{Name: "postgres-failover", Fault: 3, Run: runFailover,
			Doc: "the warehouse example's binary as 3+ processes SIGKILLed and restarted all along while PostgreSQL restarts with -m immediate and is then held down (from 1,000 events: 2 restarts and 30 s down; below: 1 restart and 8 s down): no process may exit by itself, only the poison may reach the DLQ; reports the time to the first pick task after each return"},
		{Name: "commit-cut", Fault: 4, Run: runCommitCut,
			Doc: "the connection to PostgreSQL cut during COMMIT by a TCP proxy, before and after the server got it: first every COMMIT (an outcome that stays unknown through three claims is not deleted until the worker, which keeps it through the pause, claims it again), then every seventh (settled in process by claiming again)"},
		{Name: "sqs-outage-throttle", Fault: 5, Run: runSQSOutage,
			Doc: "throttling and 5xx injected by an HTTP proxy in front of the SQS server, then the server unreachable (connections reset) and back"},
		{Name: "delete-fails-dlq-redrive", Fault: 6, Run: runDeleteFails,
			Doc: "deletes of some messages fail until they reach the DLQ; then the DLQ is redriven"},
		{Name: "visibility-expires", Fault: 7, Run: runVisibilityExpires,
			Doc: "heartbeats blocked and handlers slower than the visibility timeout: a second consumer waits on the inbox row"},
		{Name: "poison", Fault: 8, Run: runPoison,
			Doc: "poison messages (undecodable, no key, long key, NUL in key, panicking handler) mixed into good traffic"},
		{Name: "poison-bad-utf8-fake", Fault: 8, Run: runPoisonFake,
			Doc: "keys that are not valid UTF-8 (the in-process fake: SQS's JSON protocol cannot carry them)"},
		{Name: "hot-key", Fault: 9, Run: runHotKey,
			Doc: "1,000 copies of one key across several workers with small pools"},
		{Name: "sigterm", Fault: 10, Run: runSigterm,
			Doc: "SIGTERM under load (graceful), and SIGTERM with the grace period exceeded"},
	}, batchScenarios()...)
}

// finish drains, observes and checks.
func (r *Run) finish(ctx context.Context, prod *Producer, workers int, checks, notes []string) (*Report, error) {
	d, err := r.Drain(ctx, DrainOptions{Timeout: r.Size.Wait()})
	if err != nil {
		return nil, err
	}
	o, err := r.Observe(ctx, prod.Sends(), d)
	if err != nil {
		return nil, err
	}
	rep := Check(o)
	rep.Scenario, rep.Workers, rep.Duration = r.Name, workers, time.Since(r.Started)
	rep.Checks = append(rep.Checks, checks...)
	rep.Notes = append(rep.Notes, notes...)
	if r.dlqMismatch != "" {
		rep.Notes = append(rep.Notes, r.dlqMismatch)
	}
	if r.dlqDupIDs > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d DLQ receives returned a MessageId already read", r.dlqDupIDs))
	}
	if d.Rounds > 1 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the drain needed %d rounds", d.Rounds))
	}
	return &rep, nil
}

// termAll stops every process of the run with SIGTERM and reports those that did not exit 0.
func (r *Run) termAll(timeout time.Duration) []string {
	var bad []string
	for _, p := range r.procs.All() {
		if ok, _ := p.Exited(); ok {
			continue
		}
		if err := p.Term(timeout); err != nil {
			bad = append(bad, fmt.Sprintf("worker %s: %v: %s", p.ID, err, tail(p.Output(), 1500)))
		}
	}
	return bad
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// requireRedelivery fails a report whose fault made no message come back: the fault missed.
func requireRedelivery(rep *Report, err error) (*Report, error) {
	if err == nil && rep.Redelivered == 0 {
		rep.Checks = append(rep.Checks, "no message was delivered twice: the fault did not hit work in flight")
	}
	return rep, err
}

// sendAsync runs the producer in the background.
func sendAsync(ctx context.Context, p *Producer, events []Event, spread time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.Send(ctx, events, spread) }()
	return ch
}

func shuffle(evs []Event) []Event {
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	return evs
}

// withResends adds a second copy of every tenth event (a retrying producer).
func withResends(evs []Event) []Event {
	out := append([]Event(nil), evs...)
	for i := 0; i < len(evs); i += 10 {
		out = append(out, evs[i])
	}
	return out
}

func runAckBeforeCommit(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "control-ack-before-commit", RunOptions{Size: s, Visibility: 3 * time.Second})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r}
	n := min(s.Messages, 300)
	if err := prod.Send(ctx, GoodEvents("ack", n), 0); err != nil {
		return nil, err
	}
	cfg := r.WorkerConfig("broken")
	cfg.Mode, cfg.CrashAt, cfg.JitterDelay = ModeAckBeforeCommit, n/4, 20*time.Millisecond
	p, err := r.StartProc(cfg)
	if err != nil {
		return nil, err
	}
	if done, _ := p.Wait(2 * time.Minute); !done {
		return nil, fmt.Errorf("the broken worker did not crash: %s", tail(p.Output(), 2000))
	}
	if _, err := r.StartProc(r.WorkerConfig("healthy")); err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, n/2, time.Minute); err != nil {
		return nil, err
	}
	checks := r.termAll(time.Minute)
	return r.finish(ctx, prod, 2, checks, nil)
}

func runSigkill(ctx context.Context, e *Env, s Size) (*Report, error) {
	return sigkill(ctx, e, s, "sigkill", false, false)
}

// skipNoSNS says why the SNS scenario cannot run on e's server ("" when it can).
func skipNoSNS(e *Env) string {
	if e.SQS == nil {
		return "no SQS server with SNS"
	}
	if ok, why := e.SQS.SNSSupported(); !ok {
		return why + "; so the worker refuses every enveloped message that has attributes, and this scenario runs on fauxqs (SQSINBOX_TEST_SQS=fauxqs)"
	}
	return ""
}

// runSigkillSNS is the sigkill scenario with the events published to an SNS topic (PublishBatch,
// with the event_id attribute; every tenth event published twice) whose subscription delivers
// them to the queue in notification envelopes, which the worker unwraps. Every message the
// workers received must have been an envelope.
func runSigkillSNS(ctx context.Context, e *Env, s Size) (*Report, error) {
	if why := skipNoSNS(e); why != "" {
		return nil, errors.New("reliability: " + why)
	}
	return sigkill(ctx, e, s, "sigkill-sns", true, false)
}

// requireEnvelopes adds a failed check to rep unless every message the workers of the run in
// dir received was an SNS envelope.
func requireEnvelopes(rep *Report, dir string) error {
	recs, err := ReadDeleteLogs(dir)
	if err != nil {
		return err
	}
	recv, env := 0, 0
	for _, d := range recs {
		if d.Status == Received {
			recv++
			if d.SNS {
				env++
			}
		}
	}
	switch {
	case recv == 0:
		rep.Checks = append(rep.Checks, "no receive was logged")
	case env != recv:
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d messages received were not SNS envelopes", recv-env, recv))
	default:
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d receives, all SNS envelopes", env))
	}
	return nil
}

// skipNoS3 says why the offload scenario cannot run on e's server ("" when it can).
func skipNoS3(e *Env) string {
	if e.SQS == nil {
		return "no server with S3"
	}
	if msg := sqstest.NeedMessage(string(e.SQS.Kind), e.SQS.Lacks, []sqstest.Feature{sqstest.S3}); msg != "" {
		return msg + "; this scenario runs on fauxqs (SQSINBOX_TEST_SQS=fauxqs)"
	}
	return ""
}

const (
	// offloadEvery is the share of events offloaded in sigkill-offloaded: one in offloadEvery.
	offloadEvery = 5
	// offloadSize is the size of an offloaded payload: past SQS's old limit of 256 KiB (and
	// s3payload's default threshold).
	offloadSize = 300 << 10
	// offloadMaxEvents caps sigkill-offloaded's events: every payload stays in the server's
	// memory (fauxqs keeps S3 objects there) until it stops; 2,000 events put 600 payloads
	// (with the resends), about 180 MiB.
	offloadMaxEvents = 2000
)

// runSigkillOffloaded is the sigkill scenario with every fifth event offloaded to S3 (a
// 300 KiB payload, its pointer, the size attribute and the event_id attribute), the resent
// tenth ones among them; the worker processes fetch the payloads (WorkerConfig.PayloadBuckets).
// Every offloaded event must be applied, and its effect must have seen one of the payloads sent
// for it, not the pointer.
func runSigkillOffloaded(ctx context.Context, e *Env, s Size) (*Report, error) {
	if why := skipNoS3(e); why != "" {
		return nil, errors.New("reliability: " + why)
	}
	s.Messages = min(s.Messages, offloadMaxEvents)
	return sigkill(ctx, e, s, "sigkill-offloaded", false, true)
}

// requireOffloaded adds to rep the checks of an offloaded run (events were offloaded, and each
// was applied with its payload), and notes what was sent and how many offloaded messages came
// back.
func requireOffloaded(rep *Report, sends []Send, dir string) error {
	offloaded := map[int64]bool{}
	for _, s := range sends {
		if s.Payload != "" && s.Status == SendOK {
			offloaded[s.Seq] = true
		}
	}
	recs, err := ReadDeleteLogs(dir)
	if err != nil {
		return err
	}
	recv := map[int64]int{}
	for _, d := range recs {
		if d.Status == Received && offloaded[d.Seq] {
			recv[d.Seq]++
		}
	}
	again := 0
	for _, n := range recv {
		if n > 1 {
			again++
		}
	}
	switch {
	case rep.Offloaded == 0:
		rep.Checks = append(rep.Checks, "no event was sent offloaded")
	case rep.OffloadedApplied != rep.Offloaded:
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d offloaded events were not applied with their payload", rep.Offloaded-rep.OffloadedApplied, rep.Offloaded))
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %d events offloaded (%d KiB payloads; %d messages with the resends), %d applied with their payload; %d offloaded messages delivered more than once",
		rep.Offloaded, rep.Keys, offloadSize>>10, len(offloaded), rep.OffloadedApplied, again))
	return nil
}

// sigkill runs the sigkill scenario; with topic, the producer publishes to an SNS topic whose
// subscription to the queue wraps each message in an envelope; with offload, every fifth event's
// payload goes to S3 and the workers fetch it.
func sigkill(ctx context.Context, e *Env, s Size, name string, topic, offload bool) (*Report, error) {
	r, err := e.NewRun(ctx, name, RunOptions{Size: s, Visibility: 3 * time.Second, MaxReceive: 20, Topic: topic, Offload: offload})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2, Topic: r.Topic}
	cfgs := make([]WorkerConfig, s.Workers)
	procs := make([]*Proc, s.Workers)
	for i := range cfgs {
		cfgs[i] = r.WorkerConfig(fmt.Sprintf("w%d", i))
		// Long enough that a worker with messages holds some in flight most of the time, so a
		// kill lands in the middle of work even on a quiet machine.
		cfgs[i].JitterDelay = 300 * time.Millisecond
		if procs[i], err = r.StartProc(cfgs[i]); err != nil {
			return nil, err
		}
	}
	events := GoodEvents("kill", s.Messages)
	switch {
	case topic:
		events = GoodEvents("sns", s.Messages)
	case offload:
		events = OffloadedEvents("off", s.Messages, offloadEvery, offloadSize)
	}
	sent := sendAsync(ctx, prod, withResends(events), s.Spread)
	// Kill while the producer sends and messages are in the queue, and after it, while messages
	// remain, up to 3 kills per worker.
	kills, gen := 0, 0
	var sendErr error
	producing := true
	for {
		if err := sleep(ctx, time.Duration(300+rand.IntN(1200))*time.Millisecond); err != nil {
			return nil, err
		}
		select {
		case sendErr = <-sent:
			producing = false
		default:
		}
		n, _ := r.Count(ctx, r.Queue.URL)
		if !producing && (n == 0 || kills >= 3*s.Workers) {
			break // nothing left to kill in the middle of, or enough kills: the drain does the rest
		}
		if n == 0 {
			continue // no message received or waiting: a kill now would hit no work
		}
		// Kill a process that holds work, found by its delete log and stopped first so it cannot
		// finish in between: five kills of processes picked at random once all missed (CI, on a
		// loaded machine, where one process had taken every message in flight).
		i, err := r.stopOneHolding(procs, rand.IntN(len(procs)))
		if err != nil {
			return nil, err
		}
		if i < 0 {
			continue // every message is waiting in the queue: try another moment
		}
		procs[i].Kill()
		kills++
		gen++
		c := cfgs[i]
		c.ID = fmt.Sprintf("w%d.%d", i, gen)
		if procs[i], err = r.StartProc(c); err != nil {
			return nil, err
		}
	}
	if sendErr != nil {
		return nil, sendErr
	}
	checks := r.termAll(time.Minute)
	rep, err := r.finish(ctx, prod, s.Workers, nil, append([]string{fmt.Sprintf("%d SIGKILLs", kills)}, checks...))
	if err == nil && topic {
		err = requireEnvelopes(rep, r.AuditDir)
	}
	if err == nil && offload {
		err = requireOffloaded(rep, prod.Sends(), r.AuditDir)
	}
	return requireRedelivery(rep, err)
}

func runSigstop(ctx context.Context, e *Env, s Size) (*Report, error) {
	const vis = 2 * time.Second
	r, err := e.NewRun(ctx, "sigstop", RunOptions{Size: s, Visibility: vis, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	var procs []*Proc
	for i := range max(2, s.Workers) {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.JitterDelay = 150 * time.Millisecond // several handlers in flight when the stop lands
		p, err := r.StartProc(c)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	sent := sendAsync(ctx, prod, GoodEvents("stop", s.Messages), s.Spread)
	stops := 0
	for round := range 2 {
		if err := r.WaitEffects(ctx, s.Messages*(round+1)/5, s.Wait()); err != nil {
			return nil, err
		}
		// Stop a process that holds messages: with batches and a prefetch, one worker can take
		// the whole backlog, and stopping the idle one hit nothing (CI once failed so).
		p, err := r.stopHolding(ctx, procs, round, s.Messages, s.Wait())
		if err != nil {
			return nil, err
		}
		if p == nil {
			break // every event applied: no work left to stop
		}
		stops++
		err = sleep(ctx, 2*vis+time.Second)
		if cerr := p.Signal(syscall.SIGCONT); cerr != nil {
			return nil, cerr
		}
		if err != nil {
			return nil, err
		}
	}
	if err := <-sent; err != nil {
		return nil, err
	}
	var checks []string
	for _, p := range procs {
		if ok, err := p.Exited(); ok {
			checks = append(checks, fmt.Sprintf("worker %s exited: %v", p.ID, err))
		}
	}
	checks = append(checks, r.termAll(time.Minute)...)
	rep, err := r.finish(ctx, prod, len(procs), checks, []string{fmt.Sprintf("%d SIGSTOPs of %v", stops, 2*vis+time.Second)})
	return requireRedelivery(rep, err)
}

// stopHolding SIGSTOPs a process of procs (trying procs[first] first) that holds messages it has
// received and not yet settled, by its delete log, and returns it stopped. It returns nil once
// all events are applied with none held.
func (r *Run) stopHolding(ctx context.Context, procs []*Proc, first, events int, timeout time.Duration) (*Proc, error) {
	deadline := time.Now().Add(timeout)
	for {
		i, err := r.stopOneHolding(procs, first)
		if err != nil || i >= 0 {
			return procAt(procs, i), err
		}
		if n, err := r.Effects(ctx); err == nil && n >= events {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reliability: no worker held a message within %v", timeout)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func procAt(procs []*Proc, i int) *Proc {
	if i < 0 {
		return nil
	}
	return procs[i]
}

// stopOneHolding looks once, in procs' order from first, for a process holding messages it has
// received and not settled, by its delete log; it SIGSTOPs it and, if it still holds some once
// stopped (its log then stands still), returns its index with it stopped. It returns -1 when no
// process holds any. A process killed while stopped so holds work in flight for certain: its
// messages come back after the visibility timeout.
func (r *Run) stopOneHolding(procs []*Proc, first int) (int, error) {
	recs, err := ReadDeleteLogs(r.AuditDir)
	if err != nil {
		return -1, err
	}
	for k := range procs {
		i := (first + k) % len(procs)
		p := procs[i]
		if unsettled(recs, p.ID) == 0 {
			continue
		}
		if ok, _ := p.Exited(); ok {
			continue
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return -1, err
		}
		if recs, err = ReadDeleteLogs(r.AuditDir); err != nil {
			return -1, err
		}
		if unsettled(recs, p.ID) > 0 {
			return i, nil
		}
		if err := p.Signal(syscall.SIGCONT); err != nil {
			return -1, err
		}
	}
	return -1, nil
}

// unsettled counts the messages worker received and has not tried to delete, in recs.
func unsettled(recs []DeleteRecord, worker string) int {
	n := 0
	for _, rec := range recs {
		switch {
		case rec.Worker != worker:
		case rec.Status == Received:
			n++
		default:
			n--
		}
	}
	return n
}

// ErrSharedServer is returned by scenarios that restart PostgreSQL when no throwaway cluster of
// their own could be had.
var ErrSharedServer = errors.New("reliability: this scenario stops and restarts PostgreSQL, so it runs only on a throwaway cluster " +
	"that the harness starts itself from the local PostgreSQL binaries (even when TEST_DATABASE_URL is set); " +
	"a shared server is never restarted; it is not skipped")

// ownedCluster starts a throwaway cluster of the scenario's own, whatever TEST_DATABASE_URL says:
// the restarts never touch a shared server.
func ownedCluster(ctx context.Context, prefix string) (*pgtest.Server, error) {
	db, err := pgtest.StartOwned(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSharedServer, err)
	}
	if !db.Owned() {
		db.Close()
		return nil, ErrSharedServer
	}
	return db, nil
}

func runPostgresRestart(ctx context.Context, e *Env, s Size) (*Report, error) {
	db, err := ownedCluster(ctx, "relpg")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r, err := e.NewRun(ctx, "postgres-restart", RunOptions{Size: s, DB: db, Visibility: 3 * time.Second, MaxReceive: 10})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	var ws []*Worker
	defer func() {
		for _, w := range ws {
			_ = w.Stop(context.WithoutCancel(ctx))
		}
	}()
	for i := range s.Workers {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.JitterDelay = 10 * time.Millisecond
		w, err := StartWorker(ctx, c)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	sent := sendAsync(ctx, prod, withResends(GoodEvents("pg", s.Messages)), s.Spread)
	var checks, notes []string
	const outage = 5 * time.Second
	for round, mode := range []string{"immediate", "fast"} {
		if err := r.WaitEffects(ctx, s.Messages*(round+1)/4, s.Wait()); err != nil {
			return nil, err
		}
		down := time.Now()
		if err := db.Stop(mode); err != nil {
			return nil, err
		}
		err := sleep(ctx, outage)
		up := time.Now()
		if serr := db.StartAgain(); serr != nil {
			return nil, serr
		}
		if err != nil {
			return nil, err
		}
		// Receives while the database was down (the first second excluded: handlers in flight
		// find out then).
		recv, peak := 0, 0
		for _, w := range ws {
			recv += w.Audit.Calls().Total("ReceiveMessage", down.Add(time.Second), up)
			peak = max(peak, w.Audit.Calls().MaxPerSecond("ReceiveMessage", down.Add(time.Second), up))
		}
		notes = append(notes, fmt.Sprintf("stop -m %s for %v: %d receives by %d workers while down (peak %d/s per worker)",
			mode, outage, recv, len(ws), peak))
		// Pollers pause: a spin would make hundreds of receives a second.
		if peak > 20 {
			checks = append(checks, fmt.Sprintf("stop -m %s: %d receives in one second by one worker while the database was down: pollers did not pause", mode, peak))
		}
	}
	if err := <-sent; err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, s.Messages, s.Wait()); err != nil {
		return nil, err
	}
	for _, w := range ws {
		if err := w.Stop(ctx); err != nil {
			checks = append(checks, "stop: "+err.Error())
		}
	}
	ws = nil
	rep, err := r.finish(ctx, prod, s.Workers, checks, notes)
	if err == nil && rep.GoodInDLQ > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages burned their receive counts into the DLQ during the outages", rep.GoodInDLQ))
	}
	return rep, err
}

func runPoison(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "poison", RunOptions{Size: s, Visibility: 2 * time.Second, MaxReceive: 3})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	var procs []*Proc
	for i := range s.Workers {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.Backoff = 200 * time.Millisecond
		p, err := r.StartProc(c)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	evs := append(GoodEvents("good", s.Messages), PoisonEvents("poison", max(len(PoisonKinds), s.Messages/10), PoisonKinds)...)
	if err := prod.Send(ctx, shuffle(evs), s.Spread); err != nil {
		return nil, err
	}
	if err := r.WaitEffects(ctx, s.Messages, s.Wait()); err != nil {
		return nil, err
	}
	// Wait for the poison to reach the DLQ while the workers still run.
	poison := max(len(PoisonKinds), s.Messages/10)
	deadline := time.Now().Add(s.Wait())
	for {
		n, err := r.Count(ctx, r.Queue.DLQURL)
		if err == nil && n >= poison {
			break
		}
		if time.Now().After(deadline) {
			break // the checker says what is missing
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	var checks []string
	for _, p := range procs {
		if ok, err := p.Exited(); ok {
			checks = append(checks, fmt.Sprintf("worker %s crashed: %v: %s", p.ID, err, tail(p.Output(), 1500)))
		}
	}
	checks = append(checks, r.termAll(time.Minute)...)
	rep, err := r.finish(ctx, prod, s.Workers, checks, nil)
	if err == nil {
		if rep.PoisonInDLQ != rep.PoisonSent {
			rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d poison messages in the DLQ", rep.PoisonInDLQ, rep.PoisonSent))
		}
		if rep.GoodInDLQ > 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages in the DLQ", rep.GoodInDLQ))
		}
	}
	return rep, err
}

func runHotKey(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "hot-key", RunOptions{Size: s, Visibility: 10 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	hot := Event{Key: "hot-key-1", Value: "hot-value", Kind: KindGood}
	evs := GoodEvents("warm", s.Messages)
	for range 1000 {
		evs = append(evs, hot)
	}
	if err := prod.Send(ctx, shuffle(evs), s.Spread); err != nil {
		return nil, err
	}
	var ws []*Worker
	defer func() {
		for _, w := range ws {
			_ = w.Stop(context.WithoutCancel(ctx))
		}
	}()
	met := &counters{}
	for i := range max(3, s.Workers) {
		c := r.WorkerConfig(fmt.Sprintf("w%d", i))
		c.Concurrency, c.MaxConns, c.Metrics = 16, 4, met // fewer connections than handlers
		w, err := StartWorker(ctx, c)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	var checks []string
	deadline := time.Now().Add(s.Wait())
	for {
		n, err := r.Count(ctx, r.Queue.URL)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("the hot key did not drain in 4 minutes (%d left): pool exhaustion or deadlock", n))
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	for _, w := range ws {
		if err := w.Stop(ctx); err != nil {
			checks = append(checks, "stop: "+err.Error())
		}
	}
	ws = nil
	notes := []string{fmt.Sprintf("1000 copies of one key + %d other keys; %d processed, %d duplicates", s.Messages, met.get(worker.Processed), met.get(worker.Duplicates))}
	rep, err := r.finish(ctx, prod, max(3, s.Workers), checks, notes)
	if err == nil {
		var n int
		if qerr := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE key = $1`, hot.Key).Scan(&n); qerr != nil {
			return nil, qerr
		}
		if n != 1 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("the hot key has %d effects", n))
		}
	}
	return rep, err
}

func runSigterm(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "sigterm", RunOptions{Size: s, Visibility: 10 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	var checks, notes []string
	start := func(id string, slow, grace time.Duration) (*Proc, error) {
		c := r.WorkerConfig(id)
		c.SlowDelay, c.ShutdownTimeout = slow, grace
		return r.StartProc(c)
	}
	var procs []*Proc
	for i := range max(2, s.Workers) {
		p, err := start(fmt.Sprintf("w%d", i), 50*time.Millisecond, 20*time.Second)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	sent := sendAsync(ctx, prod, GoodEvents("term", s.Messages), s.Spread)
	// Graceful: SIGTERM under load; in-flight work finishes, and the process exits 0.
	if err := r.WaitEffects(ctx, s.Messages/5, s.Wait()); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := procs[0].Term(time.Minute); err != nil {
		checks = append(checks, fmt.Sprintf("graceful SIGTERM: %v: %s", err, tail(procs[0].Output(), 1500)))
	}
	notes = append(notes, fmt.Sprintf("graceful SIGTERM under load: exited in %v", time.Since(t0).Round(10*time.Millisecond)))
	// Grace period exceeded: handlers take 5 s, the grace is 1 s; they are cancelled, roll back,
	// and their messages are released for redelivery.
	slow, err := start("slow", 5*time.Second, time.Second)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, 3*time.Second); err != nil { // let it take messages
		return nil, err
	}
	t0 = time.Now()
	if err := slow.Term(time.Minute); err != nil {
		checks = append(checks, fmt.Sprintf("SIGTERM past the grace period: %v: %s", err, tail(slow.Output(), 1500)))
	}
	notes = append(notes, fmt.Sprintf("SIGTERM with handlers (5 s) longer than the grace period (1 s): exited in %v", time.Since(t0).Round(10*time.Millisecond)))
	if err := <-sent; err != nil {
		return nil, err
	}
	checks = append(checks, r.termAll(time.Minute)...)
	return r.finish(ctx, prod, len(procs)+1, checks, notes)
}

package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// skipNoRelay says why the relay scenarios cannot run on e's server ("" when they can).
func skipNoRelay(e *Env) string {
	if e.SQS != nil && e.SQS.Kind == sqstest.KindGoAws {
		return "GoAws v0.5.4 answers SendMessageBatch with empty Successful and Failed lists, so the relay cannot tell " +
			"which entries were stored and never marks a row sent; the relay scenarios run on fauxqs (SQSINBOX_TEST_SQS=fauxqs)"
	}
	return ""
}

// relayWorld is the world of a relay scenario: producers that write events through outbox.Add
// in transactions beside a business row (an order), some rolled back on purpose; relay
// processes (SIGKILLed by the scenario, or by themselves right after a publish); and two
// in-process consuming workers with the recording handler, through the inbox, whose every
// receive is recorded.
type relayWorld struct {
	r    *Run
	ob   *outbox.Outbox
	rec  *receiveRecorder
	cons []*Worker

	mu    sync.Mutex
	sends []Send
	seq   int64
	// reAdds counts the retries of committed events (Add again with the same event id, in a
	// new transaction); reAddAccepted counts those Add did not refuse with ErrDuplicateEvent.
	reAdds, reAddAccepted int
}

func newRelayWorld(ctx context.Context, e *Env, name string, s Size) (*relayWorld, error) {
	if why := skipNoRelay(e); why != "" {
		return nil, errors.New("reliability: " + why)
	}
	r, err := e.NewRun(ctx, name, RunOptions{Size: s, Visibility: 3 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	w := &relayWorld{r: r, rec: &receiveRecorder{msgs: map[string]recvMsg{}}}
	if _, err := outbox.Migrate(ctx, r.Pool, r.Schema); err != nil {
		r.Close()
		return nil, err
	}
	if _, err := r.Pool.Exec(ctx, `CREATE TABLE `+r.Schema+`.orders (key text PRIMARY KEY, value text NOT NULL)`); err != nil {
		r.Close()
		return nil, err
	}
	if w.ob, err = outbox.New(r.Pool, &outbox.Config{Schema: r.Schema}); err != nil {
		r.Close()
		return nil, err
	}
	for i := range 2 {
		c := r.WorkerConfig(fmt.Sprintf("c%d", i))
		c.Client, c.Wrap, c.JitterDelay = r.Client, w.rec.wrap, 20*time.Millisecond
		cw, err := StartWorker(ctx, c)
		if err != nil {
			w.close(ctx)
			return nil, err
		}
		w.cons = append(w.cons, cw)
	}
	return w, nil
}

func (w *relayWorld) close(ctx context.Context) {
	for _, c := range w.cons {
		_ = c.Stop(context.WithoutCancel(ctx))
	}
	w.cons = nil
	w.r.Close()
}

func (w *relayWorld) relayConfig(id string) RelayProcConfig {
	return RelayProcConfig{ID: id, DatabaseURL: w.r.DBURL, Schema: w.r.Schema, LogDir: w.r.AuditDir}
}

// write writes one event in a transaction with its order row, and commits it or (rollback)
// rolls it back. Every tenth committed event is then written again with the same event id in a
// new transaction, as a retried operation would: Add must refuse it with ErrDuplicateEvent, and
// that transaction rolls back.
func (w *relayWorld) write(ctx context.Context, ev Event, rollback bool, again bool) error {
	w.mu.Lock()
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	body, _ := json.Marshal(Body{ID: ev.Key, Value: ev.Value, Seq: seq})
	msg := outbox.Message{Destination: w.r.Queue.URL, EventID: ev.Key, Body: string(body),
		Attributes: map[string]outbox.Attribute{AttrSeq: outbox.StringAttribute(strconv.FormatInt(seq, 10))}}
	status := SendOK
	err := pgx.BeginFunc(ctx, w.r.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+w.r.Schema+`.orders (key, value) VALUES ($1, $2)`, ev.Key, ev.Value); err != nil {
			return err
		}
		if _, err := w.ob.Add(ctx, tx, msg); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	switch {
	case errors.Is(err, errRollback):
		status = SendFailed // rolled back: it must have no effect at all
	case err != nil:
		return err // a commit whose outcome is unknown is not among this scenario's faults
	}
	w.mu.Lock()
	w.sends = append(w.sends, Send{Seq: seq, Key: ev.Key, Value: ev.Value, Kind: KindGood, Status: status})
	w.mu.Unlock()
	if status != SendOK || !again {
		return nil
	}
	err = pgx.BeginFunc(ctx, w.r.Pool, func(tx pgx.Tx) error {
		_, err := w.ob.Add(ctx, tx, msg)
		switch {
		case err == nil:
			w.mu.Lock()
			w.reAddAccepted++
			w.mu.Unlock()
		case !errors.Is(err, outbox.ErrDuplicateEvent):
			return err
		}
		return errRollback
	})
	w.mu.Lock()
	w.reAdds++
	w.mu.Unlock()
	if !errors.Is(err, errRollback) {
		return err
	}
	return nil
}

var errRollback = errors.New("reliability: rolled back on purpose")

// produce writes n committed events and n/4 rolled-back ones, interleaved, with 4 writers,
// spread over spread.
func (w *relayWorld) produce(ctx context.Context, prefix string, n int, spread time.Duration) error {
	type job struct {
		ev              Event
		rollback, again bool
	}
	var jobs []job
	good, bad := GoodEvents(prefix, n), GoodEvents(prefix+"-rb", n/4)
	for i, ev := range good {
		jobs = append(jobs, job{ev: ev, again: i%10 == 0})
		if i%4 == 3 {
			jobs = append(jobs, job{ev: bad[i/4], rollback: true})
		}
	}
	ch := make(chan int)
	errs := make(chan error, 4)
	start := time.Now()
	for range 4 {
		go func() {
			var err error
			for i := range ch {
				if err == nil {
					err = w.write(ctx, jobs[i].ev, jobs[i].rollback, jobs[i].again)
				}
			}
			errs <- err
		}()
	}
	for i := range jobs {
		if spread > 0 {
			if err := sleep(ctx, time.Until(start.Add(spread*time.Duration(i)/time.Duration(len(jobs))))); err != nil {
				break
			}
		}
		ch <- i
	}
	close(ch)
	var err error
	for range 4 {
		err = errors.Join(err, <-errs)
	}
	return err
}

// backlog returns the outbox's unsent rows and its parked ones.
func (w *relayWorld) backlog(ctx context.Context) (unsent, parked int, err error) {
	err = w.r.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NULL), count(*) FILTER (WHERE parked_at IS NOT NULL)
		FROM `+w.r.Schema+`.outbox_messages`).Scan(&unsent, &parked)
	return unsent, parked, err
}

// errFatal wraps an error of waitFor's cond that ends the wait at once.
type errFatal struct{ error }

// waitFor polls cond every 100 ms until it holds or timeout passes. An error of cond is tried
// again, unless it is an errFatal, which waitFor returns unwrapped.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		var fatal errFatal
		switch {
		case errors.As(err, &fatal):
			return fatal.error
		case err == nil && ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("reliability: %s: not after %v (last error: %w)", what, timeout, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// settle waits for the outbox to be empty (ensure restarts relays that died meanwhile), stops
// the relays, waits until the consumers have emptied the queue, stops them, and runs the final
// drain and the checker, with the relay checks added.
func (w *relayWorld) settle(ctx context.Context, ensure func() error, requireDuplicates bool, notes []string) (*Report, error) {
	r := w.r
	if err := waitFor(ctx, r.Size.Wait(), "the outbox's backlog to reach 0", func() (bool, error) {
		if err := ensure(); err != nil {
			return false, errFatal{err}
		}
		n, _, err := w.backlog(ctx)
		return n == 0, err
	}); err != nil {
		return nil, err
	}
	checks := r.termAll(time.Minute)
	// Every message published is received by the recorded consumers: the final drain's worker
	// then has nothing left to receive (its receives would be missing from the recorder).
	if err := waitFor(ctx, r.Size.Wait(), "the queue to empty", func() (bool, error) {
		n, err := r.Count(ctx, r.Queue.URL)
		return n == 0, err
	}); err != nil {
		return nil, err
	}
	for _, c := range w.cons {
		if err := c.Stop(ctx); err != nil {
			checks = append(checks, "consumer stop: "+err.Error())
		}
	}
	w.cons = nil
	w.mu.Lock()
	sends := append([]Send(nil), w.sends...)
	w.mu.Unlock()
	rep, err := r.finish(ctx, &Producer{Run: r, sends: sends}, 2, checks, notes)
	if err != nil {
		return nil, err
	}
	return rep, w.checkRelay(ctx, rep, sends, requireDuplicates)
}

// checkRelay adds the relay's own checks and counts to rep: the outbox table against the
// committed and rolled-back events, the messages received against the events (at least one
// message per committed event, none for a rolled-back one, each message's event_id the event's
// own), the duplicates published, and the drain's receives (there must be none).
func (w *relayWorld) checkRelay(ctx context.Context, rep *Report, sends []Send, requireDuplicates bool) error {
	r := w.r
	fail := func(format string, args ...any) { rep.Checks = append(rep.Checks, fmt.Sprintf(format, args...)) }
	committed, rolledBack := map[string]bool{}, map[string]bool{}
	for _, s := range sends {
		if s.Status == SendOK {
			committed[s.Key] = true
		} else {
			rolledBack[s.Key] = true
		}
	}
	// The outbox table and the business table: one row per committed event, none of the others.
	for _, t := range []string{"outbox_messages", "orders"} {
		col := "event_id"
		if t == "orders" {
			col = "key"
		}
		rows, err := r.Pool.Query(ctx, `SELECT `+col+` FROM `+r.Schema+`.`+t)
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		in := 0
		for _, k := range keys {
			switch {
			case rolledBack[k]:
				fail("%s holds a row of the rolled-back event %s", t, k)
			case committed[k]:
				in++
			default:
				fail("%s holds a row of the unknown event %s", t, k)
			}
		}
		if in != len(committed) || len(keys) != len(committed) {
			fail("%s holds %d rows (%d of committed events) for %d committed events", t, len(keys), in, len(committed))
		}
	}
	unsent, parked, err := w.backlog(ctx)
	if err != nil {
		return err
	}
	if unsent != 0 || parked != 0 {
		fail("the outbox still holds %d unsent rows (%d parked)", unsent, parked)
	}
	// What the consumers received.
	w.rec.mu.Lock()
	msgs := make(map[string]recvMsg, len(w.rec.msgs))
	for id, m := range w.rec.msgs {
		msgs[id] = m
	}
	receives := w.rec.receives
	w.rec.mu.Unlock()
	copies := map[string]int{}
	mismatched := 0
	for id, m := range msgs {
		if m.event != m.bodyID {
			mismatched++
			if mismatched <= 4 {
				fail("message %s carries event_id %q for the event %q of its body", id, m.event, m.bodyID)
			}
		}
		copies[m.bodyID]++
	}
	if mismatched > 4 {
		fail("%d messages carry an event_id that is not their event's", mismatched)
	}
	dups, dupEvents, never := 0, 0, 0
	for k := range committed {
		switch n := copies[k]; {
		case n == 0:
			never++
		case n > 1:
			dups += n - 1
			dupEvents++
		}
	}
	if never > 0 {
		fail("%d committed events never reached the queue", never)
	}
	for k := range rolledBack {
		if copies[k] > 0 {
			fail("the rolled-back event %s reached the queue %d times", k, copies[k])
		}
	}
	pubs, err := ReadPublishLogs(r.AuditDir)
	if err != nil {
		return err
	}
	recs, err := ReadDeleteLogs(r.AuditDir)
	if err != nil {
		return err
	}
	drained := 0
	for _, d := range recs {
		if d.Status == Received && d.Worker == "drain" {
			drained++
		}
	}
	if drained > 0 {
		fail("the final drain received %d messages that the recorded consumers should have", drained)
	}
	w.mu.Lock()
	reAdds, reAccepted := w.reAdds, w.reAddAccepted
	w.mu.Unlock()
	if reAccepted > 0 {
		fail("outbox.Add accepted %d of %d events already in the outbox (want ErrDuplicateEvent)", reAccepted, reAdds)
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("%d events committed, %d rolled back, %d retried Adds refused as duplicates", len(committed), len(rolledBack), reAdds-reAccepted),
		fmt.Sprintf("%d messages published for them (%d logged by the relays): %d duplicates of %d events, each with its event's id; %d receives",
			len(msgs), len(pubs), dups, dupEvents, receives))
	if requireDuplicates && dups == 0 {
		fail("no event was published twice: no kill landed between a publish and its mark")
	}
	return nil
}

// recvMsg is one SQS message the consumers received: its event_id attribute and the id in its
// body (the event the producer wrote).
type recvMsg struct{ event, bodyID string }

// receiveRecorder records every message the consumers receive, by MessageId.
type receiveRecorder struct {
	mu       sync.Mutex
	msgs     map[string]recvMsg
	receives int
}

func (rec *receiveRecorder) wrap(c Client) Client { return recordingClient{c, rec} }

type recordingClient struct {
	Client
	rec *receiveRecorder
}

func (c recordingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	for _, m := range out.Messages {
		var b Body
		_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &b)
		c.rec.msgs[aws.ToString(m.MessageId)] = recvMsg{event: aws.ToString(m.MessageAttributes[outbox.EventIDAttribute].StringValue), bodyID: b.ID}
		c.rec.receives++
	}
	return out, nil
}

// runRelaySigkill: producers write events through outbox.Add (a fifth of them rolled back),
// while relay processes are SIGKILLed at random and some kill themselves right after a publish,
// before marking its rows sent; two consumers apply the events through the inbox.
func runRelaySigkill(ctx context.Context, e *Env, s Size) (*Report, error) {
	w, err := newRelayWorld(ctx, e, "relay-sigkill", s)
	if err != nil {
		return nil, err
	}
	defer w.close(ctx)
	r := w.r
	nRelays := max(2, s.Workers)
	procs := make([]*Proc, nRelays)
	crashAt := make([]int, nRelays)
	gen, kills, selfKills, planned := 0, 0, 0, 0
	// start (re)starts relay i; plan makes it kill itself after its crashAt-th publish. The first
	// relay does so after its first, and the random kills spare a relay with such a plan, so
	// the window between a publish and its mark is hit in every run.
	start := func(i int, plan bool) error {
		c := w.relayConfig(fmt.Sprintf("r%d.%d", i, gen))
		if plan && planned < 2*nRelays {
			c.CrashAt = 1 + rand.IntN(3)
			if gen == 0 {
				c.CrashAt = 1
			}
			planned++
		}
		gen++
		crashAt[i] = c.CrashAt
		var err error
		procs[i], err = r.StartRelay(c)
		return err
	}
	for i := range procs {
		if err := start(i, i == 0); err != nil {
			return nil, err
		}
	}
	// restartDead restarts the relays that killed themselves.
	restartDead := func(plan bool) error {
		for i, p := range procs {
			if ok, perr := p.Exited(); ok {
				if crashAt[i] == 0 {
					return fmt.Errorf("relay %s exited: %w: %s", p.ID, perr, tail(p.Output(), 1500))
				}
				selfKills++
				if err := start(i, plan && rand.IntN(2) == 0); err != nil {
					return err
				}
			}
		}
		return nil
	}
	sent := make(chan error, 1)
	go func() { sent <- w.produce(ctx, "relay", s.Messages, s.Spread) }()
	producing := true
	var sendErr error
	for {
		if err := sleep(ctx, time.Duration(300+rand.IntN(900))*time.Millisecond); err != nil {
			return nil, err
		}
		select {
		case sendErr = <-sent:
			producing = false
		default:
		}
		if err := restartDead(true); err != nil {
			return nil, err
		}
		n, _, _ := w.backlog(ctx)
		if !producing && (n == 0 || kills >= 3*nRelays) {
			break
		}
		if n == 0 {
			continue // no row to publish: a kill now would hit no work
		}
		i := rand.IntN(nRelays)
		if ok, _ := procs[i].Exited(); ok || crashAt[i] > 0 {
			continue // it killed itself meanwhile (the next round restarts it), or it will
		}
		procs[i].Kill()
		kills++
		if err := start(i, rand.IntN(3) == 0); err != nil {
			return nil, err
		}
	}
	if sendErr != nil {
		return nil, sendErr
	}
	rep, err := w.settle(ctx, func() error { return restartDead(false) }, true, nil)
	if err == nil {
		rep.Workers = nRelays
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d relays: %d SIGKILLs at random, %d self-SIGKILLs right after a publish (before its mark), %d relay processes in all",
			nRelays, kills, selfKills, gen))
	}
	return rep, err
}

// runRelayStampBeforePublish is the control: a broken relay marks each claim sent before it
// publishes it, and kills itself between a mark and its publish; a healthy relay then relays
// the rest. The events of the killed claim are never published: the checker must report them
// lost.
func runRelayStampBeforePublish(ctx context.Context, e *Env, s Size) (*Report, error) {
	w, err := newRelayWorld(ctx, e, "control-relay-stamp-before-publish", s)
	if err != nil {
		return nil, err
	}
	defer w.close(ctx)
	n := min(s.Messages, 100)
	if err := w.produce(ctx, "stamp", n, 0); err != nil {
		return nil, err
	}
	c := w.relayConfig("broken")
	c.Mode, c.CrashAt = RelayStampBeforePublish, 3
	p, err := w.r.StartRelay(c)
	if err != nil {
		return nil, err
	}
	if done, _ := p.Wait(2 * time.Minute); !done {
		return nil, fmt.Errorf("the broken relay did not crash: %s", tail(p.Output(), 2000))
	}
	if _, err := w.r.StartRelay(w.relayConfig("healthy")); err != nil {
		return nil, err
	}
	return w.settle(ctx, func() error { return nil }, false, []string{"1 broken relay killed between a mark and its publish, then 1 healthy relay"})
}

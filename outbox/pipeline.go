package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The relay is a pipeline: one feeder goroutine talks to PostgreSQL, and Senders publisher
// goroutines talk to SQS or SNS.
//
// The feeder claims rows, splits them into batches (jobs) and queues them for the publishers,
// claiming again while fewer than twice Senders jobs are queued, so that a publisher does not
// wait for the database while there is work (or sooner, when a claim's worth of marks waits). Each publisher reports what became of its job's rows, and the feeder writes
// those marks (sent, failed, released) in the same round trip as its next claim: one pgx.Batch,
// which PostgreSQL runs as one implicit transaction, marks first. So the rows of a FIFO group's
// head are marked sent before the claim that may take the group's next row, and the database
// is asked one round trip per claimed set instead of two.
//
// The guarantees do not depend on the pipeline: a row is marked sent only from a publisher's
// report of a successful entry; a FIFO row is claimable only when no earlier row of its group is
// unsent (so one row per group is claimed, queued or in flight at a time, and a failed one holds
// its group back); a failed entry is marked failed alone; every mark checks the claim's token.

// job is one batch of a claim, queued for a publisher.
type job struct {
	rows     []*row
	token    string
	deadline time.Time // Lease/2 after the claim was sent: a job not begun by then is released
}

// jobReport is what a publisher did with a job's rows.
type jobReport struct {
	token        string
	sent, unsent []int64
	failed       []int64
	failedErrs   []string
	fifo         bool // the job had FIFO rows: once marked, the next row of their groups may be claimable
}

// marks are the reports the feeder has not written yet: ids with the token of their claim.
type marks struct {
	sentIDs, failedIDs, releaseIDs          []int64
	sentTokens, failedTokens, releaseTokens []string
	failedErrs                              []string
	since                                   time.Time // when the first of them came
}

// markLinger is how long the marks of a backlog's last batches wait for the others' reports
// before they are written without a claim. A mark only frees the lease of a row already
// published, so waiting delays nothing a consumer sees; it bounds how long a crash of the relay
// leaves published rows to be published again.
const markLinger = 20 * time.Millisecond

func (m *marks) add(o jobReport) {
	if m.len() == 0 {
		m.since = time.Now()
	}
	for _, id := range o.sent {
		m.sentIDs, m.sentTokens = append(m.sentIDs, id), append(m.sentTokens, o.token)
	}
	for _, id := range o.unsent {
		m.releaseIDs, m.releaseTokens = append(m.releaseIDs, id), append(m.releaseTokens, o.token)
	}
	for i, id := range o.failed {
		m.failedIDs, m.failedTokens = append(m.failedIDs, id), append(m.failedTokens, o.token)
		m.failedErrs = append(m.failedErrs, o.failedErrs[i])
	}
}

func (m *marks) len() int { return len(m.sentIDs) + len(m.failedIDs) + len(m.releaseIDs) }

// feeder claims rows for the publishers and writes the marks of their reports, until Stop.
// Then it stops claiming, closes the queue (the publishers release what they take from it
// afterwards), waits for every report, writes the last marks and returns.
func (rl *Relay) feeder() {
	defer rl.wg.Done()
	var (
		m        marks
		inflight int  // jobs queued or being published, whose report has not come back
		hungry   bool // claim again as soon as the queue is short: the last claim found rows, or a wake came since
		closed   bool
		cur      cursor
	)
	poll := time.NewTimer(0)
	defer poll.Stop()
	linger := time.NewTimer(markLinger)
	defer linger.Stop()
	for {
		stopping := rl.stopCtx.Err() != nil
		if stopping && !closed {
			close(rl.jobs)
			closed = true
		}
		// A claim is due when the queue is short, or early when a claim's worth of marks waits
		// for one and the queue has room for its jobs: the marks ride with it.
		queued := len(rl.jobs)
		claim := !stopping && hungry && (queued < 2*int(rl.senders.active.Load()) ||
			m.len() >= rl.cfg.ClaimSize && queued <= 2*rl.senders.max)
		// Marks are written alone only when no claim is coming for them: at stop, when no report
		// is outstanding, past twice a claim's worth, and once the backlog has ended (no claim
		// until a wake) when a claim's worth is reached or the first has waited markLinger, so that
		// the reports of a backlog's last batches are written in a round or two, not one each.
		lingered := m.len() > 0 && !hungry && time.Since(m.since) >= markLinger
		flush := m.len() > 0 && (stopping || inflight == 0 || m.len() >= 2*rl.cfg.ClaimSize ||
			!hungry && (m.len() >= rl.cfg.ClaimSize || lingered))
		if claim || flush {
			rl.rounds.Add(1)
			if !claim {
				rl.markRounds.Add(1)
				if hungry && !stopping && inflight > 0 {
					rl.markRoundsHungry.Add(1)
				}
			}
			after := cur.after(rl.pollInterval())
			jobs, bad, got, err := rl.round(&m, claim, after, cur.group)
			if err != nil && rl.workCtx.Err() == nil {
				rl.cfg.Logger.ErrorContext(rl.workCtx, "outbox: relay round failed", "schema", rl.cfg.Schema, "error", err)
			}
			m = marks{}
			m.add(bad)
			if claim {
				cur.claimed(after, got, err == nil && got.rows == rl.cfg.ClaimSize)
				hungry = err == nil && (len(jobs) > 0 || after > 0)
				for _, j := range jobs {
					rl.jobs <- j // never blocks: the queue holds 2*MaxSenders+ClaimSize jobs, and is short before a claim
				}
				inflight += len(jobs)
				if !hungry {
					poll.Reset(rl.pollInterval())
				}
			}
			continue
		}
		if stopping && inflight == 0 {
			return
		}
		var stopped <-chan struct{}
		if !stopping {
			stopped = rl.stopCtx.Done()
		}
		var lingerC <-chan time.Time
		if m.len() > 0 && !hungry {
			linger.Reset(markLinger - time.Since(m.since))
			lingerC = linger.C
		}
		select {
		case <-lingerC:
		case o := <-rl.results:
			m.add(o)
			inflight--
			if o.fifo && len(o.sent)+len(o.unsent) > 0 {
				// A group's head was published (or let go): its next row becomes claimable
				// once this mark is written, so the mark rides with a claim at once, not
				// after PollInterval (a FIFO group otherwise moved one row per poll).
				hungry = true
			}
		case <-rl.wake:
			hungry = true
		case <-poll.C:
			hungry = true
		case <-stopped:
		}
	}
}

// publisher i publishes the queued jobs, while i is under the senders' count, until the queue
// is closed and empty, and reports each one's report. A job taken while the relay stops, or past
// its deadline, is released untried. A publisher over the count waits for it to grow; once the
// relay stops, it leaves the queue to the others.
func (rl *Relay) publisher(i int) {
	defer rl.wg.Done()
	for {
		if ok, grown := rl.senders.may(i); !ok {
			select {
			case <-grown:
				continue
			case <-rl.stopCtx.Done():
				return // the first senders.min, never over the count, empty the queue
			}
		}
		j, open := <-rl.jobs
		if !open {
			return
		}
		rl.results <- rl.publishJob(j)
	}
}

func (rl *Relay) publishJob(j *job) jobReport {
	o := jobReport{token: j.token}
	for _, r := range j.rows {
		o.fifo = o.fifo || r.fifo
	}
	ctx := rl.workCtx
	if rl.stopCtx.Err() != nil || !time.Now().Before(j.deadline) {
		for _, r := range j.rows {
			o.unsent = append(o.unsent, r.id)
		}
		return o
	}
	pctx, cancel := context.WithDeadline(ctx, minTime(j.deadline, time.Now().Add(rl.cfg.PublishTimeout)))
	ready, errs := rl.offload(pctx, j.rows)
	if len(ready) > 0 {
		began := time.Now()
		perr := rl.publish(pctx, ready)
		rl.senders.took(time.Since(began), len(ready))
		k := 0
		for i := range j.rows {
			if errs[i] == nil {
				errs[i] = perr[k]
				k++
			}
		}
	}
	cancel()
	for i, r := range j.rows {
		switch {
		case errs[i] == nil:
			o.sent = append(o.sent, r.id)
		case ctx.Err() != nil:
			// Cancelled by Stop, not refused: released, with no attempt counted.
			o.unsent = append(o.unsent, r.id)
		default:
			o.failed = append(o.failed, r.id)
			o.failedErrs = append(o.failedErrs, errs[i].Error())
		}
	}
	return o
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// cursor lets a claim start past the rows of the claim before it. A claim reads the unsent rows
// of standard destinations in id order from the front of their index, and the rows claimed
// before it (queued or being published, a few hundred when the senders are many) are at that
// front: read again and passed over at every claim, they cost more than the claim itself. After a
// full claim of rows of a standard destination, the next claim starts past the highest id it
// took. The rows it passes over that are claimable (released, backed off, committed after higher
// ids were, or of another destination than the claim's) are taken by the next claim from the
// front, which comes when a claim from the cursor is not full, and at least every fourth claim and
// every PollInterval, so that the oldest row waits for a few claims at most. FIFO rows are found
// otherwise, a group's head at a time (see the claim in NewRelay): their scan starts past the
// last FIFO group claimed and wraps around, so that each group gets its turn.
type cursor struct {
	id        int64     // start the next claim past this id; 0: from the front
	fromFront time.Time // when the last claim from the front was made
	since     int       // claims from the cursor since then
	group     [2]string // the FIFO heads' skip scan starts past this group (destination, group id)
}

// frontEvery is the most claims in a row from the cursor before one from the front.
const frontEvery = 4

// after is the id the next claim starts past (0: the front).
func (c *cursor) after(every time.Duration) int64 {
	if c.id == 0 || c.since >= frontEvery-1 || time.Since(c.fromFront) >= every {
		return 0
	}
	return c.id
}

// claimed records a claim made past after (0: from the front) that found got; full says it took
// all the rows it asked for.
func (c *cursor) claimed(after int64, got claimed, full bool) {
	c.since++
	if after == 0 {
		c.fromFront, c.since = time.Now(), 0
	}
	c.id = 0
	if full && !got.fifo {
		c.id = got.maxID
	}
	if got.fifo {
		c.group = got.group
	}
}

// claimed is what a claim took: the number of rows, the highest id, and whether any was FIFO.
type claimed struct {
	rows  int
	maxID int64
	fifo  bool
	group [2]string // the last FIFO group taken, in the database's order of (destination, group id)
}

// round writes m and, if claim, claims rows, in one round trip (one implicit transaction), and
// returns the claimed rows as jobs, and as an jobReport to mark those that cannot be published. If the round fails with marks in it, the marks are written
// again alone: a failed claim must not lose them. The marks outlive a hard stop (a row published
// and left unmarked is published again); each round is bounded by PublishTimeout.
func (rl *Relay) round(m *marks, claim bool, after int64, group [2]string) ([]*job, jobReport, claimed, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rl.workCtx), rl.cfg.PublishTimeout)
	defer cancel()
	jobs, bad, got, err := rl.roundTrip(ctx, m, claim, after, group)
	if err != nil && claim && m.len() > 0 {
		if _, _, _, err2 := rl.roundTrip(ctx, m, false, 0, group); err2 != nil {
			return nil, bad, got, errors.Join(err, err2)
		}
	}
	return jobs, bad, got, err
}

func (rl *Relay) roundTrip(ctx context.Context, m *marks, claim bool, after int64, group [2]string) ([]*job, jobReport, claimed, error) {
	var (
		published, parked int64
		took              []*row
		raw               [][]byte
		got               claimed
	)
	// Each statement carries its own reader (pgx runs them in order at Close and stops at the
	// first error), and names itself in that error.
	wrap := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("outbox: %s: %w", what, err)
		}
		return nil
	}
	exec := func(qq *pgx.QueuedQuery, what string, read func(pgconn.CommandTag)) {
		qq.Fn = func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err == nil && read != nil {
				read(tag)
			}
			return wrap(what, err)
		}
	}
	b := &pgx.Batch{}
	exec(b.Queue(rl.sql.plan), "set the claim's planner settings", nil)
	if n := len(m.releaseIDs); n > 0 {
		exec(b.Queue(rl.sql.release, m.releaseIDs, m.releaseTokens), fmt.Sprintf("release %d rows", n), nil)
	}
	if n := len(m.sentIDs); n > 0 {
		exec(b.Queue(rl.sql.sent, m.sentIDs, m.sentTokens), fmt.Sprintf("mark %d rows sent (they will be published again when the lease ends)", n),
			func(tag pgconn.CommandTag) { published = tag.RowsAffected() })
	}
	if n := len(m.failedIDs); n > 0 {
		b.Queue(rl.sql.failed, m.failedIDs, m.failedErrs, m.failedTokens, rl.cfg.BackoffMax.Seconds(), rl.cfg.BackoffMin.Seconds(), rl.cfg.MaxAttempts).
			QueryRow(func(row pgx.Row) error { return wrap(fmt.Sprintf("mark %d rows failed", n), row.Scan(&parked)) })
	}
	token := newToken()
	deadline := time.Now().Add(rl.cfg.Lease / 2)
	if claim {
		b.Queue(rl.sql.claim, rl.kinds, rl.cfg.ClaimSize, rl.cfg.Lease.Seconds(), token, after, group[0], group[1]).Query(func(rs pgx.Rows) error {
			for rs.Next() {
				r := &row{}
				var kind string
				var attrs []byte
				if err := rs.Scan(&r.id, &r.eventID, &kind, &r.destination, &r.fifo, &r.body, &attrs, &r.groupID, &r.dedupID, &r.delay); err != nil {
					return wrap("claim", err)
				}
				r.kind = Kind(kind)
				took, raw = append(took, r), append(raw, attrs)
				got.rows, got.maxID, got.fifo = got.rows+1, max(got.maxID, r.id), got.fifo || r.fifo
				if r.fifo {
					got.group = [2]string{r.destination, r.groupID} // rows come in that order
				}
			}
			return wrap("claim", rs.Err())
		})
	}
	if err := rl.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, jobReport{token: token}, claimed{}, err // the transaction rolled back: nothing of it happened
	}
	bad := jobReport{token: token}
	rl.counted(m, published, parked)
	// A row whose attributes do not decode can never be published: it fails, and is parked in
	// the end, instead of being claimed again at every lease.
	rows := took[:0]
	for i, r := range took {
		if err := r.decode(raw[i]); err != nil {
			bad.failed, bad.failedErrs = append(bad.failed, r.id), append(bad.failedErrs, err.Error())
			continue
		}
		if rl.cfg.Payloads != nil && rl.cfg.Payloads.Needs(r.size) {
			// Batched by the size it will have: a pointer in place of the body.
			r.offload, r.size = true, r.size-len(r.body)+pointerReserve
		}
		rows = append(rows, r)
	}
	if len(bad.failed) > 0 {
		rl.cfg.Logger.ErrorContext(ctx, "outbox: claimed rows whose attributes do not decode", "schema", rl.cfg.Schema, "rows", len(bad.failed), "error", bad.failedErrs[0])
	}
	// The claim's UPDATE returns rows in no set order; FIFO heads are one per group, but keep
	// the batches in id order anyway.
	sortByID(rows)
	var jobs []*job
	for _, b := range batches(rows, rl.cfg.MaxBatchBytes) {
		jobs = append(jobs, &job{rows: b, token: token, deadline: deadline})
	}
	return jobs, bad, got, nil
}

// counted adds a committed round's marks to the relay's counters, and reports lost leases and
// parked rows.
func (rl *Relay) counted(m *marks, published, parked int64) {
	rl.published.Add(published)
	if lost := int64(len(m.sentIDs)) - published; lost > 0 {
		rl.lost.Add(lost)
		rl.cfg.Logger.WarnContext(rl.workCtx, "outbox: lease lost before the rows were marked sent; they may be published twice, with the same event ids",
			"schema", rl.cfg.Schema, "rows", lost)
	}
	rl.failures.Add(int64(len(m.failedIDs)))
	if parked > 0 {
		rl.parked.Add(parked)
		rl.cfg.Logger.ErrorContext(rl.workCtx, "outbox: messages parked after repeated failures", "schema", rl.cfg.Schema,
			"parked", parked, "max_attempts", rl.cfg.MaxAttempts, "last_error", m.failedErrs[0])
	}
}

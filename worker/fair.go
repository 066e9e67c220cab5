package worker

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// fairQueue is the ready queue of a standard queue when Config.MaxPerGroup is set: the deliveries
// received and not yet taken by a runner, in the order they arrived, and how many runners each
// message group holds. A runner takes the oldest deliveries whose group holds fewer than
// MaxPerGroup runners (a group counts once per runner, however many of its messages the runner's
// batch has), so a group at its cap waits, leased, while the others go past it. It is where the
// cap lives; the runners only ask it. It knows nothing of FIFO: on a standard queue a group id
// names a tenant, and its messages have no order and never halt one another.
//
// It also decides how long its deliveries may wait (expire), instead of their leases: a capped
// group's message waits for its group's turn, which may take many handler times and still come,
// so its MaxHold counts from its group's last progress, not from its arrival.
type fairQueue struct {
	max     int           // runners one group may hold at once (Config.MaxPerGroup)
	maxHold time.Duration // Config.MaxHold

	mu      sync.Mutex
	waiting []*delivery    // in arrival order
	runners map[string]int // runners each group holds now
	msgs    map[string]int // messages of each group those runners hold (the group's in-flight)
	// last is, for each group holding runners or having held one within maxHold, when it last
	// made progress: one of its runners finished, or it took a runner while it held none.
	last    map[string]time.Time
	closed  bool
	changed chan struct{} // closed and replaced whenever a runner may find more to take

	idle atomic.Int32 // runners waiting with nothing they may take: the pollers receive at once
}

func newFairQueue(maxPerGroup int, maxHold time.Duration) *fairQueue {
	return &fairQueue{max: maxPerGroup, maxHold: maxHold, runners: map[string]int{}, msgs: map[string]int{},
		last: map[string]time.Time{}, changed: make(chan struct{})}
}

// notify wakes the runners waiting for a change; q.mu must be held.
func (q *fairQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// put queues deliveries just received.
func (q *fairQueue) put(ds []*delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, ds...)
	q.notify()
}

// take moves into buf, up to n in all, the oldest waiting deliveries that may run now, and
// records the groups the runner holds from here on in charged (a group once, however many of its
// messages buf gets). A delivery runs now when its message has no group id, when its group holds
// fewer than max runners or is charged to this runner already, or when its lease is lost (it will
// not run: the runner only ends it). It returns the channel that is closed at the next change,
// and false once the queue is closed and empty. After the close it hands out whatever waits,
// caps aside, for the runner to release.
func (q *fairQueue) take(buf []*delivery, n int, charged []string) ([]*delivery, []string, <-chan struct{}, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed && len(q.waiting) == 0 {
		return buf, charged, q.changed, false
	}
	kept := q.waiting[:0]
	for i, d := range q.waiting {
		if len(buf) == n {
			kept = append(kept, q.waiting[i:]...)
			break
		}
		g := d.m.GroupID
		switch {
		case g == "":
		case q.closed || slices.Contains(charged, g):
			q.msgs[g]++
		case q.runners[g] < q.max:
			if q.runners[g] == 0 {
				q.last[g] = time.Now() // its wait for progress starts with its first runner
			}
			q.runners[g]++
			q.msgs[g]++
			charged = append(charged, g)
		case d.lease != nil && d.lease.lostErr() != nil:
			// It will not run, so it takes none of its group's runners; counted in msgs so that
			// done, which cannot tell it apart, evens it out.
			q.msgs[g]++
		default:
			kept = append(kept, d)
			continue
		}
		buf = append(buf, d)
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	return buf, charged, q.changed, true
}

// done is a runner handing back what take gave it, once its deliveries have ended.
func (q *fairQueue) done(ds []*delivery, charged []string) {
	if len(charged) == 0 && len(ds) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		if g := d.m.GroupID; g != "" {
			if q.msgs[g]--; q.msgs[g] <= 0 {
				delete(q.msgs, g)
			}
		}
	}
	var now time.Time
	if len(charged) > 0 {
		now = time.Now()
	}
	for _, g := range charged {
		q.last[g] = now // progress
		if q.runners[g]--; q.runners[g] <= 0 {
			delete(q.runners, g)
		}
	}
	if len(charged) > 0 {
		q.notify()
	}
}

// close closes the queue, at stop, and returns what waited in it, to release.
func (q *fairQueue) close() []*delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	ds := q.waiting
	q.waiting = nil
	q.notify()
	return ds
}

// fairReleaseMax is the longest a message released for its group's stall stays away (expire):
// a group back from a stall of hours would otherwise wait as long again for those messages.
const fairReleaseMax = 15 * time.Minute

// heldRelease is deliveries that waited too long, to release to come back after a delay.
type heldRelease struct {
	ds    []*delivery
	after time.Duration
}

// expire takes out of the queue, at now, the deliveries that are not to wait any longer, for the
// caller to end: lost, those whose lease is lost (they will not run), and late, those that waited
// maxHold, to release. A delivery's wait counts from its arrival or from its group's last
// progress (last), whichever is later: a group at its cap whose runners keep finishing has its
// messages kept, leased, however long their turn takes, since each release would spend a receive
// and then the queue's maxReceiveCount, dead-lettering a message that only waited in the worker;
// only a group that made no progress for maxHold (its handler stuck, or slower than maxHold) has
// its waiting messages released. Those come back after as long as their group has made no
// progress (at most fairReleaseMax), so that a group stuck for long is received again seldom; a
// message whose group is under its cap (it waits for any runner) comes back at once. A message
// on its last receive (lastReceive, the queue's maxReceiveCount, is positive and reached) is
// never released: it would go to the DLQ without running. It waits, leased, until it runs.
func (q *fairQueue) expire(now time.Time, lastReceive int) (lost []*delivery, late []heldRelease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.waiting[:0]
	var byGroup map[string]int // group -> its entry in late
	for _, d := range q.waiting {
		g := d.m.GroupID
		from := d.arrived
		if t, ok := q.last[g]; ok && g != "" && t.After(from) {
			from = t
		}
		switch {
		case d.lease != nil && d.lease.lostErr() != nil:
			lost = append(lost, d)
		case now.Sub(from) < q.maxHold, lastReceive > 0 && d.m.ReceiveCount >= lastReceive:
			kept = append(kept, d)
		default:
			i, ok := byGroup[g]
			if !ok {
				var after time.Duration
				if g != "" && q.runners[g] >= q.max {
					after = min(now.Sub(q.last[g]), fairReleaseMax) // stalled: as long as it has been
				}
				if byGroup == nil {
					byGroup = map[string]int{}
				}
				i = len(late)
				byGroup[g] = i
				late = append(late, heldRelease{after: after})
			}
			late[i].ds = append(late[i].ds, d)
		}
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	for g, t := range q.last {
		if q.runners[g] == 0 && now.Sub(t) >= q.maxHold {
			delete(q.last, g) // no longer decides any wait: the arrival is later, or maxHold passed
		}
	}
	return lost, late
}

// OtherGroups is the name of the [GroupStat] that sums up the groups past the top ones. No
// MessageGroupId can take it: SQS allows no space in one.
const OtherGroups = "other groups"

// TopGroups is the number of message groups that [Worker.Groups] and [GroupMetrics] report by
// name; the rest are summed up under [OtherGroups], so that a metric's labels stay bounded however
// many tenants a queue has.
const TopGroups = 10

// GroupStat is what a worker with Config.MaxPerGroup holds of one message group (one tenant of a
// fair queue) now.
type GroupStat struct {
	// Group is the MessageGroupId, or [OtherGroups] for the sum of the groups past the top ones.
	Group string `json:"group"`
	// InFlight is the number of its messages whose handlers run (or whose batch does).
	InFlight int `json:"in_flight"`
	// Runners is the number of runners (handler calls) that hold its messages: at most
	// Config.MaxPerGroup (for OtherGroups, the sum).
	Runners int `json:"runners"`
	// Waiting is the number of its messages received and waiting for a runner (leased all along).
	Waiting int `json:"waiting"`
	// OldestWait is how long the oldest of them has waited (for OtherGroups, the longest of the
	// groups'), or 0; in JSON, nanoseconds.
	OldestWait time.Duration `json:"oldest_wait"`
}

// stats returns the top groups by in-flight messages (then by waiting ones), at most top, plus
// one OtherGroups entry for the rest if there are any. Messages without a group id are left out.
func (q *fairQueue) stats(top int, now time.Time) []GroupStat {
	q.mu.Lock()
	by := make(map[string]*GroupStat, len(q.msgs))
	get := func(g string) *GroupStat {
		s := by[g]
		if s == nil {
			s = &GroupStat{Group: g}
			by[g] = s
		}
		return s
	}
	for g, n := range q.msgs {
		get(g).InFlight = n
	}
	for g, n := range q.runners {
		get(g).Runners = n
	}
	for _, d := range q.waiting {
		if d.m.GroupID == "" {
			continue
		}
		s := get(d.m.GroupID)
		s.Waiting++
		if s.Waiting == 1 { // the oldest: waiting is in arrival order
			s.OldestWait = now.Sub(d.arrived)
		}
	}
	q.mu.Unlock()
	all := make([]GroupStat, 0, len(by))
	for _, s := range by {
		all = append(all, *s)
	}
	slices.SortFunc(all, func(a, b GroupStat) int {
		return cmp.Or(cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(a.Group, b.Group))
	})
	if len(all) <= top {
		return all
	}
	other := GroupStat{Group: OtherGroups}
	for _, s := range all[top:] {
		other.InFlight += s.InFlight
		other.Runners += s.Runners
		other.Waiting += s.Waiting
		other.OldestWait = max(other.OldestWait, s.OldestWait)
	}
	return append(all[:top], other)
}

// GroupMetrics is a [Metrics] that also takes the per-group figures of a worker with
// Config.MaxPerGroup on a standard queue: every second, the top [TopGroups] groups by in-flight
// messages and one [OtherGroups] entry for the rest. An implementation replaces what it reported
// before (a group missing from groups has gone quiet), so its labels stay bounded. The workerprom
// and workerotel packages implement it.
type GroupMetrics interface {
	Metrics
	SetGroups(groups []GroupStat)
}

// groupMetricsInterval is how often a worker reports its groups to a [GroupMetrics].
const groupMetricsInterval = time.Second

// Groups returns, for a worker with Config.MaxPerGroup on a standard queue, the top [TopGroups]
// message groups by in-flight messages (then by waiting ones) and one [OtherGroups] entry for the
// rest; nil otherwise.
func (w *Worker) Groups() []GroupStat {
	if w.Queue() == nil || w.fair == nil {
		return nil
	}
	return w.fair.stats(TopGroups, time.Now())
}

// reportGroups hands the groups to gm every groupMetricsInterval until the stop.
func (w *Worker) reportGroups(gm GroupMetrics) {
	ctx := w.life.StopContext()
	t := time.NewTicker(groupMetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			gm.SetGroups(w.fair.stats(TopGroups, time.Now()))
		case <-ctx.Done():
			gm.SetGroups(nil)
			return
		}
	}
}

// gatherFair is gather for a fairQueue: it fills buf with up to n deliveries that may run now
// (waiting for the first one, then up to Linger for more), and reports the groups charged to the
// runner and whether the queue is still open.
func (w *Worker) gatherFair(buf []*delivery, n int, charged []string, timer **time.Timer) ([]*delivery, []string, bool) {
	var (
		changed <-chan struct{}
		open    bool
	)
	for {
		buf, charged, changed, open = w.fair.take(buf, n, charged)
		if !open || len(buf) > 0 {
			break
		}
		w.fair.idle.Add(1)
		<-changed // a delivery, a runner done, or the close
		w.fair.idle.Add(-1)
	}
	if !open || len(buf) == n || w.cfg.Linger <= 0 {
		return buf, charged, open
	}
	w.armLinger(timer)
	defer (*timer).Stop()
	for len(buf) < n {
		select {
		case <-changed:
			buf, charged, changed, open = w.fair.take(buf, n, charged)
			if !open {
				return buf, charged, false
			}
		case <-(*timer).C:
			return buf, charged, true
		}
	}
	return buf, charged, true
}

// fairProbeEvery is how often, at most, probeFair receives for the groups under their cap.
const fairProbeEvery = 5 * time.Millisecond

// blocked reports whether a runner is free but every delivery waiting is over its group's cap,
// so that only a message of another group, still on the queue, could use the runner.
func (q *fairQueue) blocked() bool {
	if q.idle.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting) > 0
}

// probeFair receives one message at a time, at most every fairProbeEvery, while a group at its
// cap holds every slot and a runner is free for the others (blocked) and no poller has begun a
// receive since: the pollers receive only when a slot frees, and while one group's backlog holds
// the slots they free in bursts, one handler time apart, which another group's message would
// otherwise wait out. A fair queue hands over that message first when there is one; else the
// capped group's, which waits its turn. Each such message holds a slot of w.e.spare
// (max(Prefetch, BatchSize) of them), so what the worker holds stays bounded.
func (w *Worker) probeFair() {
	ctx := w.life.StopContext()
	t := time.NewTicker(fairProbeEvery)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if !w.fair.blocked() || w.e.pause.active() || time.Since(time.Unix(0, w.recvStarted.Load())) < fairProbeEvery {
			continue
		}
		if w.e.slots.TryAcquire(1) { // a poller can receive
			w.e.slots.Release(1)
			continue
		}
		if !w.e.spare.TryAcquire(1) {
			continue
		}
		requested := w.e.now()
		out, err := w.client.ReceiveMessage(w.recvCtx, w.receiveInput(1), w.opt)
		if err != nil || len(out.Messages) == 0 {
			w.e.spare.Release(1)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			// The pollers report receive errors; this only backs off.
			fails++
			if sleep(ctx, jitter(expo(pollBackoffMin, pollBackoffMax, fails))) != nil {
				return
			}
			continue
		}
		fails = 0
		w.dispatch(out.Messages, 1, requested, true)
	}
}

// fairHoldEvery is how often holdFair looks for the fair queue's deliveries that are not to wait
// any longer: the precision of MaxHold there, and the longest a delivery whose lease is lost
// keeps its slot while no runner takes it.
const fairHoldEvery = 100 * time.Millisecond

// holdFair ends, every fairHoldEvery until the stop, the deliveries that the fair queue's expire
// takes out: a lost lease's, not started, and the late ones, released. Each gives back its slot
// at once, so the pollers (and probeFair) go on receiving for a free runner.
func (w *Worker) holdFair() {
	ctx := w.life.StopContext()
	t := time.NewTicker(fairHoldEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		lost, late := w.fair.expire(time.Now(), w.e.maxRecv)
		for _, d := range lost {
			d.notStarted()
		}
		for _, r := range late {
			releaseAllAfter(r.ds, r.after)
		}
	}
}

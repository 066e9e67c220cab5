package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFairQueueStats (no server: the fair queue alone): the stats name the top TopGroups groups
// by in-flight messages and sum the rest under OtherGroups; a runner takes the oldest messages
// whose groups are under the cap, and a group at its cap waits until a runner hands it back.
func TestFairQueueStats(t *testing.T) {
	t.Parallel()
	q := newFairQueue(1, time.Minute)
	now := time.Now()
	var ds []*delivery
	for g := range TopGroups + 2 {
		for range g + 1 { // group g has g+1 messages
			ds = append(ds, &delivery{m: &Message{GroupID: fmt.Sprintf("g%02d", g)}, arrived: now.Add(-time.Second)})
		}
	}
	q.put(ds)
	var held [][]string
	var taken [][]*delivery
	for range TopGroups + 2 {
		buf, charged, _, open := q.take(nil, 10, nil)
		if !open {
			t.Fatal("closed")
		}
		held = append(held, charged)
		taken = append(taken, buf)
	}
	// One runner per group (cap 1): the first took g00's message, g01's two, then g02's three...
	// up to 10 a runner; later runners find every group's remaining messages capped.
	st := q.stats(TopGroups, now)
	if len(st) != TopGroups+1 || st[TopGroups].Group != OtherGroups {
		t.Fatalf("stats %+v; want %d groups and %s", st, TopGroups, OtherGroups)
	}
	if st[0].Group != "g11" && st[0].InFlight < st[1].InFlight {
		t.Errorf("stats not by in-flight: %+v", st)
	}
	for _, s := range st[:TopGroups] {
		if s.Runners > 1 {
			t.Errorf("group %s holds %d runners; the cap is 1", s.Group, s.Runners)
		}
	}
	waiting := 0
	for _, s := range st {
		waiting += s.Waiting
		if s.Waiting > 0 && s.OldestWait < time.Second {
			t.Errorf("%s: oldest wait %v, want 1s", s.Group, s.OldestWait)
		}
	}
	if waiting == 0 {
		t.Fatal("nothing waiting: the cap held nothing back")
	}
	for i := range taken {
		q.done(taken[i], held[i])
	}
	buf, _, _, _ := q.take(nil, 100, nil)
	if len(buf) == 0 {
		t.Error("nothing taken after the runners handed their groups back")
	}
}

// TestFairQueueExpire (no server: the fair queue alone): expire hands over a lost lease's
// delivery at once; it keeps a capped group's waiting messages while the group progresses, even
// long after their arrival, and releases them once the group has made no progress for MaxHold,
// to come back after as long as it has not; a message of no group waits MaxHold from its arrival
// and comes back at once; a message on its last receive is never released.
func TestFairQueueExpire(t *testing.T) {
	t.Parallel()
	const maxHold = time.Second
	q := newFairQueue(1, maxHold)
	old := time.Now().Add(-5 * time.Second) // every message arrived 5 s ago
	mk := func(body, group string, receives int) *delivery {
		return &delivery{m: &Message{Body: []byte(body), GroupID: group, ReceiveCount: receives}, arrived: old}
	}
	a0, a1, a2, aLast, n0, gone := mk("a0", "a", 1), mk("a1", "a", 1), mk("a2", "a", 1), mk("a3", "a", 2), mk("n0", "", 1), mk("c0", "c", 1)
	gone.lease = &lease{lost: errors.New("receipt handle gone")}
	q.put([]*delivery{a0, a1, a2, aLast, n0, gone})
	bodies := func(ds []*delivery) string {
		var s []string
		for _, d := range ds {
			s = append(s, string(d.m.Body))
		}
		return strings.Join(s, ",")
	}

	buf, charged, _, _ := q.take(nil, 1, nil) // a0: group a is at its cap from now
	lost, late := q.expire(time.Now().Add(maxHold/2), 2)
	if got := bodies(lost); got != "c0" {
		t.Errorf("lost %q, want c0", got)
	}
	if len(late) != 1 || bodies(late[0].ds) != "n0" || late[0].after != 0 {
		t.Errorf("late %+v; want n0 alone (no group: MaxHold from its arrival), back at once", late)
	}

	// a progresses: a0, whose runner started 5 s ago, finishes. a1 and a2 arrived 5 s ago, but
	// their group has just progressed: kept.
	q.mu.Lock()
	q.last["a"] = old
	q.mu.Unlock()
	q.done(buf, charged)
	if lost, late := q.expire(time.Now().Add(maxHold*9/10), 2); len(lost)+len(late) != 0 {
		t.Errorf("lost %q, late %+v: a progressed under MaxHold ago; its messages must be kept", bodies(lost), late)
	}
	buf, charged, _, _ = q.take(nil, 1, nil)
	if bodies(buf) != "a1" || len(charged) != 1 {
		t.Fatalf("took %q charged %v, want a1 charged to a", bodies(buf), charged)
	}
	if lost, late := q.expire(time.Now().Add(maxHold*9/10), 2); len(lost)+len(late) != 0 {
		t.Errorf("lost %q, late %+v: a took its runner under MaxHold ago; its messages must be kept", bodies(lost), late)
	}

	// No progress for MaxHold: a2 is released, to come back after as long as a has made none;
	// a3, on its last receive (maxReceiveCount 2), is kept.
	lost, late = q.expire(time.Now().Add(maxHold*3/2), 2)
	if len(lost) != 0 || len(late) != 1 || bodies(late[0].ds) != "a2" {
		t.Fatalf("lost %q, late %+v; want a2 released", bodies(lost), late)
	}
	if d := late[0].after; d < maxHold*3/2 || d > maxHold*5/2 {
		t.Errorf("a2 comes back after %v; want about 1.5 s, the time a made no progress", d)
	}
	if st := q.stats(TopGroups, time.Now()); len(st) != 1 || st[0].Waiting != 1 {
		t.Errorf("stats %+v; want a3 alone waiting", st)
	}
	// Without a redrive policy, a3 is no message's last receive: released too.
	if _, late := q.expire(time.Now().Add(maxHold*3/2), 0); len(late) != 1 || bodies(late[0].ds) != "a3" {
		t.Errorf("late %+v without maxReceiveCount; want a3 released", late)
	}
	q.done(buf, charged)
}

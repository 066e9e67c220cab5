package worker

import (
	"fmt"
	"testing"
	"time"
)

// TestFairQueueStats (no server: the fair queue alone): the stats name the top TopGroups groups
// by in-flight messages and sum the rest under OtherGroups; a runner takes the oldest messages
// whose groups are under the cap, and a group at its cap waits until a runner hands it back.
func TestFairQueueStats(t *testing.T) {
	t.Parallel()
	q := newFairQueue(1)
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

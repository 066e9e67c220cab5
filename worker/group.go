package worker

import (
	"slices"
	"sync"
)

// group is the deliveries of one FIFO group from one receive, not yet started. It is where the
// FIFO rule lives: once a message of the group is not done (it failed, was not started, or was
// released), the group halts at it, and no later message of it runs in this delivery: they are
// released, to come back in order after the one not done. Everything that decides a message's
// fate asks the group (delivery.behind, delivery.halt, Batch.Runnable).
//
// In a pause (a dependency every message needs is down), a message of the group that fails for
// the outage is parked in the group instead (park): put back at its place, still leased, with the
// later ones of this delivery kept behind it rather than released, so that the whole group runs
// again, in order, when the pause ends, and an outage spends no receive count (pause.go).
type group struct {
	mu       sync.Mutex
	rest     []*delivery // in order; emptied for good by halt (but for those before the halt)
	halted   bool
	at       int  // the position of the first delivery not done, once halted
	parked   bool // a delivery of the group is parked at parkedAt: those after it wait behind it
	parkedAt int
}

// next removes and returns up to n deliveries from the front of the group. Taking the front
// takes a parked delivery back to run: the group is no longer parked.
func (g *group) next(n int, out []*delivery) []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := min(n, len(g.rest))
	if k > 0 {
		g.parked = false
	}
	out = append(out, g.rest[:k]...)
	g.rest = g.rest[k:]
	return out
}

// len returns the number of deliveries waiting in the group.
func (g *group) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.rest)
}

// mark records that d is not done: the later deliveries of its group must not run. Those the
// group still holds are released when d ends (halt).
func (g *group) mark(d *delivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.halted || d.pos < g.at {
		g.halted, g.at = true, d.pos
	}
}

// halt records that d is not done and returns the deliveries the group still held after it, to
// release. Those before it (parked ones) stay.
func (g *group) halt(d *delivery) []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.halted || d.pos < g.at {
		g.halted, g.at = true, d.pos
	}
	var out []*delivery
	keep := g.rest[:0]
	for _, x := range g.rest {
		if x.pos > g.at {
			out = append(out, x)
		} else {
			keep = append(keep, x)
		}
	}
	g.rest = keep
	return out
}

// park puts d back in the group at its place, to run again once the pause ends. d failed for an
// outage (first), or it waited behind one that did (then), or it waited in a runner for the pause
// to end: parked is set for the first two, so that the later deliveries of the group wait too.
// A halt that d's own failure made is lifted: d is not done, but it is not given up either.
func (g *group) park(d *delivery, parked bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.halted && g.at == d.pos {
		g.halted = false
	}
	if parked && (!g.parked || d.pos < g.parkedAt) {
		g.parked, g.parkedAt = true, d.pos
	}
	i := len(g.rest)
	for i > 0 && g.rest[i-1].pos > d.pos {
		i--
	}
	g.rest = slices.Insert(g.rest, i, d)
}

// parkedBefore reports whether a delivery of the group before d is parked: d must wait too.
func (g *group) parkedBefore(d *delivery) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parked && d.pos > g.parkedAt && (!g.halted || d.pos <= g.at)
}

// stop empties the group, at stop, and returns what it held.
func (g *group) stop() []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := g.rest
	g.rest = nil
	return rest
}

// behind reports whether d comes after a delivery of its group that is not done, or parked: it
// must not run.
func (g *group) behind(d *delivery) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return (g.halted && d.pos > g.at) || (g.parked && d.pos > g.parkedAt)
}

// groups splits ds by MessageGroupId, keeping their order.
func groups(ds []*delivery) [][]*delivery {
	var out [][]*delivery
	idx := make(map[string]int, len(ds))
	for _, d := range ds {
		i, ok := idx[d.m.GroupID]
		if !ok {
			i = len(out)
			idx[d.m.GroupID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], d)
	}
	return out
}

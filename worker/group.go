package worker

import "sync"

// group is the deliveries of one FIFO group from one receive, not yet started. It is where the
// FIFO rule lives: once a message of the group is not done (it failed, was not started, or was
// released), the group halts at it, and no later message of it runs in this delivery: they are
// released, to come back in order after the one not done. Everything that decides a message's
// fate asks the group (delivery.behind, delivery.halt, Batch.Runnable).
type group struct {
	mu     sync.Mutex
	rest   []*delivery // emptied for good by halt
	halted bool
	at     int // the position of the first delivery not done, once halted
}

// next removes and returns up to n deliveries from the front of the group.
func (g *group) next(n int, out []*delivery) []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := min(n, len(g.rest))
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

// halt records that d is not done and returns the deliveries the group still held (all after d),
// to release.
func (g *group) halt(d *delivery) []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.halted || d.pos < g.at {
		g.halted, g.at = true, d.pos
	}
	rest := g.rest
	g.rest = nil
	return rest
}

// stop empties the group, at stop, and returns what it held.
func (g *group) stop() []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := g.rest
	g.rest = nil
	return rest
}

// behind reports whether d comes after a delivery of its group that is not done: it must not run.
func (g *group) behind(d *delivery) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.halted && d.pos > g.at
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

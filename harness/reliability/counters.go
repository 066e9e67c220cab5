package reliability

import (
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// counters is a worker.Metrics that counts.
type counters struct {
	mu sync.Mutex
	n  map[worker.Counter]int
}

func (c *counters) Add(k worker.Counter, n int) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[worker.Counter]int{}
	}
	c.n[k] += n
	c.mu.Unlock()
}
func (c *counters) Observe(worker.Histogram, time.Duration) {}
func (c *counters) SetInFlight(int)                         {}
func (c *counters) get(k worker.Counter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (c *counters) snapshot() map[worker.Counter]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// countersPrefix starts the line in which a worker process writes its counters when it stops.
const countersPrefix = "reliability worker: counters "

// Counters returns the worker counters the process wrote when it stopped, and false if it did
// not write them (it was killed, or has not stopped yet).
func (p *Proc) Counters() (map[worker.Counter]int, bool) {
	out := p.Output()
	i := strings.LastIndex(out, countersPrefix)
	if i < 0 {
		return nil, false
	}
	line, _, _ := strings.Cut(out[i+len(countersPrefix):], "\n")
	var n map[worker.Counter]int
	if err := json.Unmarshal([]byte(line), &n); err != nil {
		return nil, false
	}
	return n, true
}

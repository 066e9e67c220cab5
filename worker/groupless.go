package worker

import (
	"sync/atomic"
)

// GrouplessWarnAfter is how many messages a worker with Config.MaxPerGroup receives, none of them
// with a MessageGroupId, before it warns that the cap has nothing to act on.
const GrouplessWarnAfter = 100

// grouplessWatch notices a worker with Config.MaxPerGroup whose messages carry no MessageGroupId:
// the cap then holds no message back, and the tenant fairness the user configured is not
// there. On SQS this is a producer that does not set the group id; on fauxqs and GoAws, which
// drop the group id of a message sent to a standard queue, it is every producer. It warns once,
// after GrouplessWarnAfter such messages, and never once a message with a group id was seen.
type grouplessWatch struct {
	seen atomic.Int64 // messages received without a group id while none had one
	done atomic.Bool  // warned, or a message had a group id: nothing more to watch
}

// noteGroupless counts the group-less messages among the deliveries just received on a fair
// queue, and warns once when GrouplessWarnAfter of them came before any with a group id.
func (w *Worker) noteGroupless(ds []*delivery) {
	g := &w.groupless
	if g.done.Load() {
		return
	}
	for _, d := range ds {
		if d.m.GroupID != "" {
			g.done.Store(true)
			return
		}
	}
	if g.seen.Add(int64(len(ds))) < GrouplessWarnAfter || !g.done.CompareAndSwap(false, true) {
		return
	}
	w.log.Warn("worker: Config.MaxPerGroup is set, but no message received so far had a MessageGroupId, so "+
		"no group is capped and one tenant's backlog can take every runner; producers must set MessageGroupId "+
		"on each message (fauxqs and GoAws drop it on standard queues, so there no message ever has one)",
		"max_per_group", w.cfg.MaxPerGroup, "received_without_group", g.seen.Load())
}

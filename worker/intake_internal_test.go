package worker

import (
	"testing"
	"time"
)

// A runner's buffer can come back from holdBack (during a pause) with more capacity than
// HandlerBatch; the next batch must still stop at HandlerBatch. CI once panicked here, slicing the
// outcome array to 16 with a batch of 10. No SQS server: gather reads the ready queue only.
func TestGatherStopsAtHandlerBatch(t *testing.T) {
	t.Parallel()
	w := &Worker{ready: make(chan item, 32), cfg: Config{Linger: time.Millisecond}}
	for range 32 {
		w.ready <- item{m: &Message{}}
	}
	var timer *time.Timer
	buf := make([]*Message, 0, 16) // as holdBack's appends leave it
	for range 3 {
		var open bool
		buf, _, open = w.gather(buf[:0], 10, nil, &timer)
		if !open || len(buf) != 10 {
			t.Fatalf("gather = %d messages (open %v), want 10", len(buf), open)
		}
	}
	// Two left: a short batch once Linger passes.
	buf, _, _ = w.gather(buf[:0], 10, nil, &timer)
	if len(buf) != 2 {
		t.Fatalf("last gather = %d messages, want 2", len(buf))
	}
}

package worker

import "time"

// SetClock replaces the clock from which w counts SQS's 12-hour cap (the receive times and the
// heartbeat's arithmetic). Call it before Start.
func SetClock(w *Worker, now func() time.Time) { w.e.now = now }

package sqstest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// WaitCount waits until the queue at url holds want messages (see [Count]), failing the test
// after timeout.
func WaitCount(t testing.TB, c Counter, url string, want int, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, fmt.Sprintf("%d messages in the queue", want), func() (bool, string) {
		n, err := Count(context.Background(), c, url)
		if err != nil {
			return false, err.Error()
		}
		return n == want, fmt.Sprintf("%d messages", n)
	})
}

// PollUntil polls cond every 10 ms until it holds (true), or ctx ends or timeout passes (false),
// for code that waits inside a handler, where WaitFor's failing of the test does not fit.
func PollUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

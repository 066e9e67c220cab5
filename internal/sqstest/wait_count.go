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

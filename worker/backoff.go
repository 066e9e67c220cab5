package worker

import (
	"math/rand/v2"
	"time"
)

// ExponentialBackoff returns a backoff function: for the nth receive (n >= 1) it gives a random
// duration between half and all of min·2^(n-1), capped at max.
func ExponentialBackoff(min, max time.Duration) func(n int) time.Duration {
	return func(n int) time.Duration { return jitter(expo(min, max, n)) }
}

func expo(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return clampDur(d, 0, max)
}

// jitter returns a random duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func clampDur(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}

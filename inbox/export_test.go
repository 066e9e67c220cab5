package inbox

import (
	"context"
	"time"
)

// SetClock replaces the clock the inbox numbers its generations by (the generations layout).
func SetClock(ib *Inbox, now func() time.Time) { ib.now = now }

// Rotate runs one rotation of the generations (PurgeOlderThan's, with the rotation's report).
func Rotate(ib *Inbox, age time.Duration) (Rotation, error) {
	return ib.Rotate(context.Background(), age)
}

// RotateCtx is Rotate bounded by ctx.
func RotateCtx(ctx context.Context, ib *Inbox, age time.Duration) (Rotation, error) {
	return ib.Rotate(ctx, age)
}

// SetKeyTimeHorizon replaces how far ahead of the clock a key's time is still a time (the keytime
// layout; Config.Retention and a day).
func SetKeyTimeHorizon(ib *Inbox, d time.Duration) { ib.keyTimeHorizon = d }

package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

type eventCtxKey struct{}

type event struct{ handler, key string }

func withEvent(ctx context.Context, handler, key string) context.Context {
	return context.WithValue(ctx, eventCtxKey{}, event{handler, key})
}

// EventKey returns the key of the event being processed and the handler processing it, from the
// ctx that [Inbox.Run] passes to its function. ok is false outside such a function.
func EventKey(ctx context.Context) (key, handler string, ok bool) {
	e, ok := ctx.Value(eventCtxKey{}).(event)
	return e.key, e.handler, ok
}

// ErrNoEvent is returned by [StepKey] outside an inbox function.
var ErrNoEvent = errors.New("inbox: no event in context (StepKey must be called inside Inbox.Run's function)")

// StepKey returns a deterministic idempotency key for one downstream step (a payment, an email)
// of the event being processed: the hex SHA-256 of the handler, the event key and step. Every
// redelivery of the event gets the same key for the same step, so pass it to the downstream
// system (an Idempotency-Key header, a FIFO MessageDeduplicationId) and a retry never creates
// a second effect there. The key is 64 characters of [0-9a-f].
func StepKey(ctx context.Context, step string) (string, error) {
	key, handler, ok := EventKey(ctx)
	if !ok {
		return "", ErrNoEvent
	}
	return DeriveStepKey(handler, key, step), nil
}

// DeriveStepKey is [StepKey] with explicit parts. Parts are length-prefixed, so no two
// different (handler, key, step) triples give the same input.
func DeriveStepKey(handler, key, step string) string {
	h := sha256.New()
	for _, p := range []string{"sqsinbox/step/v1", handler, key, step} {
		var n [8]byte
		for i := range 8 {
			n[i] = byte(uint64(len(p)) >> (56 - 8*i))
		}
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

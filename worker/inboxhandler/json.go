package inboxhandler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/worker"
)

// ErrBadBody is wrapped by the error of a [JSON] handler whose message body does not decode into
// its type. The message goes the retry-then-DLQ way: nothing is dropped silently.
var ErrBadBody = errors.New("inboxhandler: the message body does not decode")

// Validator is implemented by an event type that checks itself after decoding (a required field,
// a range). A [JSON] handler calls it, and an error sends the message the retry-then-DLQ way.
type Validator interface {
	Validate() error
}

// JSON adapts a function of a decoded event to a [Func]: the message body is decoded into a T
// (one JSON object; unknown fields are allowed, so producers can add some), checked with its
// Validate method if it has one, and passed to fn. A body that does not decode or validate
// returns an error wrapping [ErrBadBody] that names the type, and fn is not called.
func JSON[T any](fn func(ctx context.Context, tx pgx.Tx, m *worker.Message, event T) error) Func {
	name := reflect.TypeFor[T]().String()
	return func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		var v T
		if err := json.Unmarshal(m.Body, &v); err != nil {
			return fmt.Errorf("%w into %s: message %s: %w", ErrBadBody, name, m.ID, err)
		}
		if val, ok := any(&v).(Validator); ok {
			if err := val.Validate(); err != nil {
				return fmt.Errorf("%w into a valid %s: message %s: %w", ErrBadBody, name, m.ID, err)
			}
		}
		return fn(ctx, tx, m, v)
	}
}

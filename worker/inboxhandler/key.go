package inboxhandler

import (
	"errors"
	"fmt"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// KeyFunc returns the event key of a message. An error wrapping [inbox.ErrKeyMissing] means
// "this source has no key", which [FirstKey] answers by trying the next source; any other error
// sends the message the retry-then-DLQ way.
type KeyFunc func(m *worker.Message) (string, error)

// DefaultAttribute is the message attribute that [DefaultKey] reads first.
const DefaultAttribute = "event_id"

// DefaultField is the top-level JSON field of the body that [DefaultKey] reads when the
// attribute is absent.
const DefaultField = "id"

// DefaultKey takes the key from the message attribute "event_id", else from the body's top-level
// JSON field "id". It never falls back to the SQS MessageId: a message with neither fails (and,
// after the queue's maxReceiveCount, goes to the DLQ).
func DefaultKey(m *worker.Message) (string, error) { return defaultKey(m) }

var defaultKey = FirstKey(KeyFromAttribute(DefaultAttribute), KeyFromJSONField(DefaultField))

// KeyFromAttribute takes the key from the String (or Number) message attribute name, validated
// with [inbox.ValidateKey].
func KeyFromAttribute(name string) KeyFunc {
	src := fmt.Sprintf("message attribute %q", name)
	return func(m *worker.Message) (string, error) {
		v, ok := m.Attribute(name)
		if !ok {
			return "", &inbox.KeyError{What: "event key", Source: src, Err: inbox.ErrKeyMissing}
		}
		if err := inbox.ValidateKeyFrom(v, src); err != nil {
			return "", err
		}
		return v, nil
	}
}

// KeyFromJSONField takes the key from a top-level field of the JSON object body (see
// [inbox.KeyFromJSONField]).
func KeyFromJSONField(field string) KeyFunc {
	return func(m *worker.Message) (string, error) { return inbox.KeyFromJSONField(m.Body, field) }
}

// KeyFromBody takes the SHA-256 of the raw body as the key (see [inbox.KeyFromBody]). Use it only
// when the producer assigns no id and always sends the same bytes for the same event.
func KeyFromBody(m *worker.Message) (string, error) { return inbox.KeyFromBody(m.Body), nil }

// KeyFromMessageID takes the SQS MessageId as the key. It is a documented fallback with limits:
// it deduplicates redeliveries of one SQS message only. A producer's retry of SendMessage, or a
// redrive from the DLQ, gives the same event a new MessageId, and the event is processed again.
func KeyFromMessageID(m *worker.Message) (string, error) {
	if err := inbox.ValidateKey(m.ID); err != nil {
		return "", err
	}
	return m.ID, nil
}

// KeyFromSNSMessageID takes the SNS MessageId of a message that arrived in an SNS envelope (see
// worker.Config.SNS) as the key. Like the SQS MessageId, it is a fallback with limits: a
// producer that retries its Publish gets a new SNS MessageId for the same event. A message that
// did not come through SNS has no such key ([inbox.ErrKeyMissing]).
func KeyFromSNSMessageID(m *worker.Message) (string, error) {
	const src = "SNS MessageId"
	if m.SNS == nil {
		return "", &inbox.KeyError{What: "event key", Source: src, Err: inbox.ErrKeyMissing}
	}
	if err := inbox.ValidateKeyFrom(m.SNS.MessageID, src); err != nil {
		return "", err
	}
	return m.SNS.MessageID, nil
}

// FirstKey tries each KeyFunc in turn and returns the first key found. A source's error other
// than a missing key stops the search: a present but invalid key is an error, never skipped.
func FirstKey(fns ...KeyFunc) KeyFunc {
	return func(m *worker.Message) (string, error) {
		var errs []error
		for _, fn := range fns {
			k, err := fn(m)
			if err == nil {
				return k, nil
			}
			if !errors.Is(err, inbox.ErrKeyMissing) {
				return "", err
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			return "", &inbox.KeyError{What: "event key", Err: inbox.ErrKeyMissing}
		}
		return "", errors.Join(errs...)
	}
}

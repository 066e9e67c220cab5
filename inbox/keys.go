package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest event key, in bytes.
const MaxKeyLen = 512

// MaxHandlerLen is the longest handler name, in bytes.
const MaxHandlerLen = 128

// Sentinel errors that a *[KeyError] wraps, one per problem.
var (
	ErrKeyEmpty       = errors.New("empty")
	ErrKeyTooLong     = errors.New("too long")
	ErrKeyInvalidUTF8 = errors.New("not valid UTF-8")
	ErrKeyNUL         = errors.New("contains a NUL byte")
	ErrKeyMissing     = errors.New("missing")
	ErrKeyNotString   = errors.New("not a string or number")
	ErrBodyNotObject  = errors.New("body is not a JSON object")
)

// KeyError says why an event key (or handler name) was refused, and where it came from. The key
// itself is not included: keys can hold personal data.
type KeyError struct {
	// What is "event key" or "handler name".
	What string
	// Source says where the key came from, such as `JSON field "id"`. Empty if not known.
	Source string
	// Len is the key's length in bytes.
	Len int
	// Max is the longest allowed length in bytes.
	Max int
	// Err is one of the ErrKey... sentinels.
	Err error
}

func (e *KeyError) Error() string {
	var b strings.Builder
	b.WriteString("inbox: invalid ")
	b.WriteString(e.What)
	if e.Source != "" {
		b.WriteString(" from ")
		b.WriteString(e.Source)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if errors.Is(e.Err, ErrKeyTooLong) {
		fmt.Fprintf(&b, " (%d bytes, at most %d allowed)", e.Len, e.Max)
	}
	return b.String()
}

func (e *KeyError) Unwrap() error { return e.Err }

// ValidateKey returns a *[KeyError] if key is empty, longer than [MaxKeyLen] bytes, not valid
// UTF-8, or contains NUL (which PostgreSQL text cannot store).
func ValidateKey(key string) error { return validate("event key", key, MaxKeyLen) }

// ValidateHandler applies the same rules to a handler name, with [MaxHandlerLen].
func ValidateHandler(name string) error { return validate("handler name", name, MaxHandlerLen) }

func validate(what, s string, max int) error {
	var err error
	switch {
	case s == "":
		err = ErrKeyEmpty
	case len(s) > max:
		err = ErrKeyTooLong
	case !utf8.ValidString(s):
		err = ErrKeyInvalidUTF8
	case strings.IndexByte(s, 0) >= 0:
		err = ErrKeyNUL
	default:
		return nil
	}
	return &KeyError{What: what, Len: len(s), Max: max, Err: err}
}

// KeyFromBody returns "sha256:" and the hex SHA-256 of body, the raw bytes as received. Use it
// only when the producer assigns no id: two sends of the same event with different bytes
// (a re-serialised copy, a new timestamp) get different keys.
func KeyFromBody(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyFromJSONField returns the top-level field of the JSON object body, which must be a
// non-empty string (or a number, taken as written), validated with [ValidateKey]. Errors are
// *[KeyError] values that name the field.
func KeyFromJSONField(body []byte, field string) (string, error) {
	src := fmt.Sprintf("JSON field %q", field)
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return "", &KeyError{What: "event key", Source: src, Len: len(body), Err: ErrBodyNotObject}
	}
	raw, ok := obj[field]
	if !ok {
		return "", &KeyError{What: "event key", Source: src, Err: ErrKeyMissing}
	}
	raw = bytes.TrimSpace(raw)
	var key string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", &KeyError{What: "event key", Source: src, Err: ErrKeyNotString}
		}
		// encoding/json replaces invalid UTF-8 with U+FFFD; a key must not be altered.
		if !utf8.Valid(raw) {
			return "", &KeyError{What: "event key", Source: src, Len: len(raw), Err: ErrKeyInvalidUTF8}
		}
	case len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')):
		key = string(raw)
	default:
		return "", &KeyError{What: "event key", Source: src, Err: ErrKeyNotString}
	}
	if err := ValidateKey(key); err != nil {
		var ke *KeyError
		if errors.As(err, &ke) {
			ke.Source = src
		}
		return "", err
	}
	return key, nil
}

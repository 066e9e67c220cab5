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
// non-empty string (or a number, taken as written), validated with [ValidateKey]. The body must
// be exactly one valid JSON object (whitespace around it is fine); when the field appears twice,
// the last one counts, as with encoding/json. Errors are *[KeyError] values that name the field.
func KeyFromJSONField(body []byte, field string) (string, error) {
	source := func() string { return fmt.Sprintf("JSON field %q", field) } // formatted only on failure
	fail := func(n int, err error) error {
		return &KeyError{What: "event key", Source: source(), Len: n, Err: err}
	}
	// json.Valid checks the whole body without allocating; the scan below then walks only the
	// top level, so a large body costs no map and no copies of the other fields.
	raw, isObject, found := topLevelField(body, field)
	if !isObject {
		return "", fail(len(body), ErrBodyNotObject)
	}
	if !found {
		return "", fail(0, ErrKeyMissing)
	}
	var key string
	switch {
	case raw[0] == '"':
		// encoding/json replaces invalid UTF-8 with U+FFFD; a key must not be altered.
		if !utf8.Valid(raw) {
			return "", fail(len(raw), ErrKeyInvalidUTF8)
		}
		if bytes.IndexByte(raw, '\\') < 0 {
			key = string(raw[1 : len(raw)-1])
		} else if err := json.Unmarshal(raw, &key); err != nil {
			return "", fail(0, ErrKeyNotString)
		}
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		key = string(raw)
	default:
		return "", fail(0, ErrKeyNotString)
	}
	if err := ValidateKeyFrom(key, source()); err != nil {
		return "", err
	}
	return key, nil
}

// ValidateKeyFrom is [ValidateKey] for a key read from source (such as `message attribute
// "event_id"`), which the returned *[KeyError] names.
func ValidateKeyFrom(key, source string) error {
	err := ValidateKey(key)
	var ke *KeyError
	if errors.As(err, &ke) {
		ke.Source = source
	}
	return err
}

// topLevelField finds field among the top-level members of the JSON object body and returns its
// value's raw bytes. When the field repeats, the last one wins, as with encoding/json. isObject
// is false when body is not one valid JSON object (data after the object included).
func topLevelField(body []byte, field string) (raw []byte, isObject, found bool) {
	if !json.Valid(body) {
		return nil, false, false
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil, false, false
	}
	i++
	for {
		i = skipSpace(body, i)
		switch body[i] {
		case '}':
			return raw, true, found
		case ',':
			i = skipSpace(body, i+1)
		}
		kEnd := stringEnd(body, i)
		name := body[i:kEnd]
		i = skipSpace(body, skipSpace(body, kEnd)+1) // past the colon
		vEnd := valueEnd(body, i)
		if memberNameIs(name, field) {
			raw, found = body[i:vEnd], true
		}
		i = vEnd
	}
}

// The scanners below run only on input json.Valid accepted, so they need no bounds checks of
// their own beyond the slice's.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at b[i] == '"'.
func stringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index just past the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for ; i < len(b); i++ { // a number, true, false or null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// memberNameIs reports whether the quoted member name equals field once unescaped.
func memberNameIs(quoted []byte, field string) bool {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == field
	}
	var name string
	return json.Unmarshal(quoted, &name) == nil && name == field
}

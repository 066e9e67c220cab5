package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// MaxKeyLen is the longest Idempotency-Key accepted, in characters (keys are ASCII). The name
// follows inbox.MaxKeyLen.
const MaxKeyLen = 255

// Deprecated names, kept for one release.
const (
	// Deprecated: use MaxKeyLen.
	MaxKeyLength = MaxKeyLen
)

var (
	// Deprecated: use ErrHeaderMissing (inbox.ErrKeyMissing means something else: a key source
	// that is absent).
	ErrKeyMissing = ErrHeaderMissing
	// Deprecated: use ErrHeaderMultiple.
	ErrKeyMultiple = ErrHeaderMultiple
)

// Errors of [ParseKey]. Each becomes a 400 response whose problem detail says which. None of
// them, nor any message of this package, contains the key itself: keys can hold personal data.
var (
	// ErrHeaderMissing means the request has no Idempotency-Key header.
	ErrHeaderMissing = errors.New("idempotency: the Idempotency-Key header is missing")
	// ErrHeaderMultiple means the request has more than one Idempotency-Key header, or a list in one.
	ErrHeaderMultiple = errors.New("idempotency: more than one Idempotency-Key")
	// ErrKeyEmpty means the key is empty.
	ErrKeyEmpty = errors.New("idempotency: the Idempotency-Key is empty")
	// ErrKeyTooLong means the key is longer than [MaxKeyLen].
	ErrKeyTooLong = fmt.Errorf("idempotency: the Idempotency-Key is longer than %d characters", MaxKeyLen)
	// ErrKeyControl means the key contains a control character.
	ErrKeyControl = errors.New("idempotency: the Idempotency-Key contains a control character")
	// ErrKeySyntax means the header is neither a structured-field string nor a bare token.
	ErrKeySyntax = errors.New("idempotency: the Idempotency-Key is not a structured-field string or token")
)

// ParseKey returns the key carried by the values of the Idempotency-Key header (as given by
// http.Header.Values). Following draft-ietf-httpapi-idempotency-key-header, the key is a
// structured-field string ("abc", with \" and \\ as the only escapes); a bare token (abc) is
// accepted too and means the same key. Leniently, a bare token may start with a digit, so a bare
// UUID is a key. Surrounding spaces and tabs are ignored.
//
// ParseKey fails with an error wrapping one of the ErrKey... values for: no header; more than one
// header or a list; an empty key; a key over [MaxKeyLen] characters; a control character; and
// anything else that is not a single string or token (non-ASCII, parameters, stray characters).
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrHeaderMissing
	case 1:
	default:
		return "", ErrHeaderMultiple
	}
	v := trimOWS(values[0])
	if v == "" {
		return "", ErrKeyEmpty
	}
	var key string
	var err error
	if v[0] == '"' {
		key, err = parseString(v)
	} else {
		key, err = parseToken(v)
	}
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", ErrKeyEmpty
	}
	if len(key) > MaxKeyLen {
		return "", ErrKeyTooLong
	}
	return key, nil
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isControl(c byte) bool { return c < 0x20 || c == 0x7f }

// parseString parses an RFC 8941 sf-string that starts at s[0] == '"' and must end the value.
func parseString(s string) (string, error) {
	buf := make([]byte, 0, len(s))
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case isControl(c):
			return "", ErrKeyControl
		case c >= 0x80:
			return "", fmt.Errorf("%w: it contains a non-ASCII byte", ErrKeySyntax)
		case c == '\\':
			i++
			if i == len(s) {
				return "", fmt.Errorf("%w: it ends inside an escape", ErrKeySyntax)
			}
			if s[i] != '"' && s[i] != '\\' {
				if isControl(s[i]) {
					return "", ErrKeyControl
				}
				return "", fmt.Errorf("%w: only \\\" and \\\\ may be escaped", ErrKeySyntax)
			}
			buf = append(buf, s[i])
		case c == '"':
			return string(buf), rest(s[i+1:])
		default:
			buf = append(buf, c)
		}
	}
	return "", fmt.Errorf("%w: the string is not closed", ErrKeySyntax)
}

// rest checks what follows a complete item: nothing is allowed.
func rest(s string) error {
	s = trimOWS(s)
	switch {
	case s == "":
		return nil
	case s[0] == ',':
		return ErrHeaderMultiple
	case s[0] == ';':
		return fmt.Errorf("%w: parameters are not supported", ErrKeySyntax)
	}
	for i := range len(s) {
		if isControl(s[i]) {
			return ErrKeyControl
		}
	}
	return fmt.Errorf("%w: characters follow the key", ErrKeySyntax)
}

// parseToken parses a bare token: tchar, ":" and "/" (RFC 8941 sf-token, allowing a leading
// digit).
func parseToken(s string) (string, error) {
	for i := range len(s) {
		c := s[i]
		switch {
		case isTokenChar(c):
		case isControl(c):
			return "", ErrKeyControl
		case c == ',' || c == ';' || c == ' ' || c == '\t':
			if err := rest(s[i:]); err != nil {
				return "", err
			}
			return s[:i], nil // unreachable: trailing OWS was trimmed
		case c >= 0x80:
			return "", fmt.Errorf("%w: it contains a non-ASCII byte", ErrKeySyntax)
		default:
			return "", fmt.Errorf("%w: a bare key may hold only letters, digits and !#$%%&'*+-.^_`|~:/; quote anything else", ErrKeySyntax)
		}
	}
	return s, nil
}

func isTokenChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

// keyHash is what identifies a key in the table: SHA-256 of a domain tag and the
// length-prefixed principal and key, so no two (principal, key) pairs share an input.
func keyHash(principal, key string) []byte {
	h := sha256.New()
	h.Write([]byte("sqsinbox/idempotency-key/v1"))
	writeField(h, principal)
	writeField(h, key)
	return h.Sum(nil)
}

// fingerprint identifies the request a key was first used with.
func fingerprint(method, route string, bodySum [sha256.Size]byte) []byte {
	h := sha256.New()
	h.Write([]byte("sqsinbox/idempotency-request/v1"))
	writeField(h, method)
	writeField(h, route)
	h.Write(bodySum[:])
	return h.Sum(nil)
}

func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

var parseCases = []struct {
	name   string
	values []string
	key    string
	err    error
}{
	{"token", []string{"abc"}, "abc", nil},
	{"string", []string{`"abc"`}, "abc", nil},
	{"uuid", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
	{"quoted uuid", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
	{"spaces around", []string{"  \t\"a b\" "}, "a b", nil},
	{"escapes", []string{`"say \"hi\" \\o/"`}, `say "hi" \o/`, nil},
	{"token chars", []string{"a!#$%&'*+-.^_`|~:/Z9"}, "a!#$%&'*+-.^_`|~:/Z9", nil},
	{"max length", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
	{"max length quoted", []string{`"` + strings.Repeat("k", 255) + `"`}, strings.Repeat("k", 255), nil},
	{"missing", nil, "", idempotency.ErrHeaderMissing},
	{"two headers", []string{"a", "b"}, "", idempotency.ErrHeaderMultiple},
	{"two identical headers", []string{"a", "a"}, "", idempotency.ErrHeaderMultiple},
	{"list", []string{`"a", "b"`}, "", idempotency.ErrHeaderMultiple},
	{"token list", []string{"a,b"}, "", idempotency.ErrHeaderMultiple},
	{"empty header", []string{""}, "", idempotency.ErrKeyEmpty},
	{"blank header", []string{"  "}, "", idempotency.ErrKeyEmpty},
	{"empty string", []string{`""`}, "", idempotency.ErrKeyEmpty},
	{"too long", []string{strings.Repeat("k", 256)}, "", idempotency.ErrKeyTooLong},
	{"too long quoted", []string{`"` + strings.Repeat("k", 256) + `"`}, "", idempotency.ErrKeyTooLong},
	{"control in string", []string{"\"a\x01b\""}, "", idempotency.ErrKeyControl},
	{"newline in token", []string{"a\nb"}, "", idempotency.ErrKeyControl},
	{"DEL", []string{"a\x7f"}, "", idempotency.ErrKeyControl},
	{"NUL", []string{"\"a\x00\""}, "", idempotency.ErrKeyControl},
	{"tab inside string", []string{"\"a\tb\""}, "", idempotency.ErrKeyControl},
	{"unclosed", []string{`"abc`}, "", idempotency.ErrKeySyntax},
	{"bad escape", []string{`"a\nb"`}, "", idempotency.ErrKeySyntax},
	{"dangling escape", []string{`"a\`}, "", idempotency.ErrKeySyntax},
	{"parameters", []string{"abc;v=1"}, "", idempotency.ErrKeySyntax},
	{"string parameters", []string{`"abc";v=1`}, "", idempotency.ErrKeySyntax},
	{"trailing junk", []string{`"abc"x`}, "", idempotency.ErrKeySyntax},
	{"space in token", []string{"a b"}, "", idempotency.ErrKeySyntax},
	{"non-ASCII", []string{"\"caf\xc3\xa9\""}, "", idempotency.ErrKeySyntax},
	{"non-ASCII token", []string{"caf\xc3\xa9"}, "", idempotency.ErrKeySyntax},
	{"byte sequence", []string{":YWJj:"}, ":YWJj:", nil},
	{"bad token char", []string{"a=b"}, "", idempotency.ErrKeySyntax},
	{"quote inside token", []string{`a"b"`}, "", idempotency.ErrKeySyntax},
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := idempotency.ParseKey(tc.values)
			if !errors.Is(err, tc.err) || key != tc.key {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q, %v", tc.values, key, err, tc.key, tc.err)
			}
			if err != nil {
				for _, v := range tc.values {
					if len(v) > 2 && strings.Contains(err.Error(), v) {
						t.Fatalf("the error %q contains the key", err)
					}
				}
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, tc := range parseCases {
		if len(tc.values) == 1 {
			f.Add(tc.values[0])
		}
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := idempotency.ParseKey([]string{v})
		if err != nil {
			if key != "" {
				t.Fatalf("a key %q with error %v", key, err)
			}
			return
		}
		if key == "" || len(key) > idempotency.MaxKeyLen {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := range len(key) {
			if key[i] < 0x20 || key[i] >= 0x7f {
				t.Fatalf("accepted byte %#x", key[i])
			}
		}
		// Quoting the key as a structured-field string gives the same key back.
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if back, err := idempotency.ParseKey([]string{q}); err != nil || back != key {
			t.Fatalf("%q parsed as %q; its quoted form %q as %q, %v", v, key, q, back, err)
		}
	})
}

package inbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqsinbox/sqsinbox/inbox"
)

var keyFieldCases = []struct {
	name string
	body string
	want string
	err  error
}{
	{"string", `{"id":"evt_9f3k","order_id":"o1"}`, "evt_9f3k", nil},
	{"escaped", `{"id":"evt_\u00e9\n"}`, "evt_é\n", nil},
	{"number", `{"id": 12345}`, "12345", nil},
	{"negative number", `{"id":-1.5e3}`, "-1.5e3", nil},
	{"nested id is not top level", `{"data":{"id":"x"}}`, "", inbox.ErrKeyMissing},
	{"missing", `{"order_id":"o1"}`, "", inbox.ErrKeyMissing},
	{"empty", `{"id":""}`, "", inbox.ErrKeyEmpty},
	{"null", `{"id":null}`, "", inbox.ErrKeyNotString},
	{"bool", `{"id":true}`, "", inbox.ErrKeyNotString},
	{"object", `{"id":{}}`, "", inbox.ErrKeyNotString},
	{"NUL escape", `{"id":"a\u0000b"}`, "", inbox.ErrKeyNUL},
	{"too long", `{"id":"` + strings.Repeat("x", inbox.MaxKeyLen+1) + `"}`, "", inbox.ErrKeyTooLong},
	{"invalid UTF-8", "{\"id\":\"a\xffb\"}", "", inbox.ErrKeyInvalidUTF8},
	{"array", `["id"]`, "", inbox.ErrBodyNotObject},
	{"not JSON", `id=1`, "", inbox.ErrBodyNotObject},
	{"empty body", ``, "", inbox.ErrBodyNotObject},
	{"null body", `null`, "", inbox.ErrBodyNotObject},
	{"truncated", `{"id":"abc`, "", inbox.ErrBodyNotObject},
	{"data after the object", `{"id":"a"} {"id":"b"}`, "", inbox.ErrBodyNotObject},
	{"repeated field: the last wins", `{"id":"a","id":"b"}`, "b", nil},
	{"escaped member name", `{"\u0069d":"evt_1"}`, "evt_1", nil},
	{"id after nested values", `{"a":{"id":"x","b":[1,{"c":"}"}]},"s":"\"id\":","id":"evt_2"}`, "evt_2", nil},
	{"whitespace everywhere", " \n{ \"x\" : [ ] ,\t\"id\"\r\n:\n 7 } \n", "7", nil},
	{"number last", `{"id":42}`, "42", nil},
}

func TestKeyFromJSONField(t *testing.T) {
	t.Parallel()
	for _, tc := range keyFieldCases {
		got, err := inbox.KeyFromJSONField([]byte(tc.body), "id")
		if tc.err != nil {
			var ke *inbox.KeyError
			if !errors.Is(err, tc.err) || !errors.As(err, &ke) || !strings.Contains(err.Error(), `JSON field "id"`) {
				t.Errorf("%s: err = %v, want a KeyError naming the field and wrapping %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestKeyErrorDoesNotLeakTheKey(t *testing.T) {
	t.Parallel()
	secret := "customer-jane@example.com-" + strings.Repeat("x", inbox.MaxKeyLen)
	err := inbox.ValidateKey(secret)
	if err == nil || strings.Contains(err.Error(), "jane") {
		t.Fatalf("err = %v; want an error without the key's text", err)
	}
	if !strings.Contains(err.Error(), "at most 512") {
		t.Fatalf("err = %v; want the limit named", err)
	}
}

func TestKeyFromBodyHashesTheRawBytes(t *testing.T) {
	t.Parallel()
	a := inbox.KeyFromBody([]byte(`{"a":1,"b":2}`))
	b := inbox.KeyFromBody([]byte(`{"b":2,"a":1}`)) // the same object, other bytes
	if a == b {
		t.Fatal("reordered bytes gave the same key: the key was taken from a re-serialised copy")
	}
	if a != inbox.KeyFromBody([]byte(`{"a":1,"b":2}`)) {
		t.Fatal("KeyFromBody is not deterministic")
	}
	// sha256 of the empty string, a known vector.
	if got := inbox.KeyFromBody(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("KeyFromBody(nil) = %s", got)
	}
	if err := inbox.ValidateKey(a); err != nil {
		t.Fatalf("a body key fails validation: %v", err)
	}
}

func FuzzKeyFromJSONField(f *testing.F) {
	for _, tc := range keyFieldCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		key, err := inbox.KeyFromJSONField(body, "id")
		if err != nil {
			var ke *inbox.KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("error %v is not a *KeyError", err)
			}
			return
		}
		if err := inbox.ValidateKey(key); err != nil {
			t.Fatalf("returned key %q fails ValidateKey: %v", key, err)
		}
	})
}

// keyFromJSONFieldByDecoding is the straightforward reading of a top-level field, through
// encoding/json and a map, that KeyFromJSONField must agree with on every valid JSON body.
func keyFromJSONFieldByDecoding(body []byte, field string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return "", inbox.ErrBodyNotObject
	}
	raw, ok := obj[field]
	if !ok {
		return "", inbox.ErrKeyMissing
	}
	var key string
	switch {
	case raw[0] == '"':
		if !utf8.Valid(raw) {
			return "", inbox.ErrKeyInvalidUTF8
		}
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", inbox.ErrKeyNotString
		}
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		key = string(raw)
	default:
		return "", inbox.ErrKeyNotString
	}
	if err := inbox.ValidateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// FuzzKeyFromJSONFieldMatchesDecoding checks the top-level scanner against encoding/json.
func FuzzKeyFromJSONFieldMatchesDecoding(f *testing.F) {
	for _, tc := range keyFieldCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := inbox.KeyFromJSONField(body, "id")
		want, wantErr := keyFromJSONFieldByDecoding(body, "id")
		if !json.Valid(body) {
			if !errors.Is(err, inbox.ErrBodyNotObject) {
				t.Fatalf("invalid JSON %q: err = %v, want ErrBodyNotObject", body, err)
			}
			return
		}
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: got %q, %v; decoding gives %q, %v", body, got, err, want, wantErr)
		}
		if wantErr == nil {
			return
		}
		sentinel := wantErr // a sentinel, or a *KeyError from ValidateKey that wraps one
		if u := errors.Unwrap(wantErr); u != nil {
			sentinel = u
		}
		var ke *inbox.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, sentinel) {
			t.Fatalf("%q: err = %v, decoding gives %v", body, err, wantErr)
		}
	})
}

func BenchmarkKeyFromJSONField(b *testing.B) {
	small := []byte(`{"id":"evt_9f3k","order_id":"ord_7731","amount":4200,"currency":"EUR"}`)
	var large bytes.Buffer
	large.WriteString(`{"items":[`)
	for i := range 2000 {
		if i > 0 {
			large.WriteByte(',')
		}
		fmt.Fprintf(&large, `{"sku":"sku-%d","qty":%d,"note":"a \"quoted\" note"}`, i, i%7)
	}
	large.WriteString(`],"id":"evt_9f3k"}`)
	for _, bc := range []struct {
		name string
		body []byte
	}{{"small", small}, {"large", large.Bytes()}} {
		for _, impl := range []struct {
			name string
			fn   func([]byte, string) (string, error)
		}{{"scan", inbox.KeyFromJSONField}, {"decode-reference", keyFromJSONFieldByDecoding}} {
			b.Run(bc.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(bc.body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.fn(bc.body, "id"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "evt_1", "a\x00b", "\xff", strings.Repeat("k", 513), strings.Repeat("é", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := inbox.ValidateKey(key)
		valid := key != "" && len(key) <= inbox.MaxKeyLen && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
		if valid != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, but valid = %v", key, err, valid)
		}
		if err != nil && inbox.ValidateKey(inbox.KeyFromBody([]byte(key))) != nil {
			t.Fatal("the body-hash fallback of a bad key is itself invalid")
		}
	})
}

package idempotency

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"reflect"
	"testing"
)

func TestHashesAreUnambiguous(t *testing.T) {
	t.Parallel()
	if bytes.Equal(keyHash("a", "bc"), keyHash("ab", "c")) || bytes.Equal(keyHash("", "abc"), keyHash("abc", "")) {
		t.Fatal("the key hash does not separate principal and key")
	}
	if !bytes.Equal(keyHash("acme", "k"), keyHash("acme", "k")) || len(keyHash("acme", "k")) != sha256.Size {
		t.Fatal("the key hash is not a stable SHA-256")
	}
	body := sha256.Sum256([]byte("{}"))
	if bytes.Equal(fingerprint("POST", "/a", body), fingerprint("POS", "T/a", body)) {
		t.Fatal("the fingerprint does not separate method and route")
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("Link", "</a>; rel=next")
	h.Add("Link", "</b>; rel=prev")
	h.Set("Content-Type", "application/json")
	h.Set("Set-Cookie", "session=secret")
	h.Set("X-Internal", "1")
	allow := map[string]bool{"Link": true, "Content-Type": true}
	b, err := encodeHeaders(h, allow)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeHeaders(b)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"Content-Type", "application/json"}, {"Link", "</a>; rel=next"}, {"Link", "</b>; rel=prev"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

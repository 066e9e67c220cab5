package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

const payBody = `{"amount":1250,"currency":"EUR"}`

func TestConcurrentIdenticalRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// The first execution holds its key until some retry has been told 409, so both kinds of
	// answer are exercised; the deadline keeps a broken build from hanging.
	conflict := make(chan struct{})
	var once sync.Once
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-conflict:
		case <-time.After(20 * time.Second):
		}
		return false
	}
	const n = 100
	responses := make([]response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			responses[i], errs[i] = b.try(t.Context(), request{keys: []string{"pay-100"}, body: payBody})
			if errs[i] == nil && responses[i].status == http.StatusConflict {
				once.Do(func() { close(conflict) })
			}
		})
	}
	wg.Wait()
	var first *response
	var conflicts, replays int
	for i, r := range responses {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch {
		case r.status == http.StatusCreated && !r.replayed():
			if first != nil {
				t.Fatalf("two first executions: %s and %s", first.body, r.body)
			}
			first = &responses[i]
		case r.status == http.StatusConflict:
			if code := problemCode(t, r); code != idempotency.CodeKeyInFlight {
				t.Fatalf("409 code %q", code)
			}
			if r.header.Get("Retry-After") == "" {
				t.Fatal("409 without Retry-After")
			}
			conflicts++
		case r.status == http.StatusCreated && r.replayed():
			replays++
		default:
			t.Fatalf("request %d: status %d body %s", i, r.status, r.body)
		}
	}
	if first == nil {
		t.Fatal("no request executed")
	}
	for _, r := range responses {
		if r.replayed() && !bytes.Equal(r.body, first.body) {
			t.Fatalf("replay %s differs from the first response %s", r.body, first.body)
		}
	}
	if got := b.app.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	if got := b.count(t, "payments"); got != 1 {
		t.Fatalf("%d payments, want 1", got)
	}
	if conflicts == 0 {
		t.Fatal("no 409 was seen")
	}
	t.Logf("1 execution, %d conflicts, %d replays", conflicts, replays)
}

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.do(t, request{keys: []string{"k-1"}, body: payBody})
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	for range 3 {
		again := b.do(t, request{keys: []string{`"k-1"`}, body: payBody}) // the string form is the same key
		if again.status != first.status || !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay %d %q, want %d %q", again.status, again.body, first.status, first.body)
		}
		if !again.replayed() {
			t.Fatal("replay lacks the Idempotent-Replayed header")
		}
		for _, h := range []string{"Content-Type", "Location"} {
			if again.header.Get(h) != first.header.Get(h) {
				t.Fatalf("%s = %q, want %q", h, again.header.Get(h), first.header.Get(h))
			}
		}
	}
	if got := b.app.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}

func TestStored4xxIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	bad := `{"amount":-5,"currency":"EUR"}`
	first := b.do(t, request{keys: []string{"bad-1"}, body: bad})
	if first.status != http.StatusBadRequest || first.replayed() {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := b.do(t, request{keys: []string{"bad-1"}, body: bad})
	if again.status != http.StatusBadRequest || !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: %d %v %s", again.status, again.replayed(), again.body)
	}
	if got := b.app.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}

func TestMismatchGives422(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.do(t, request{keys: []string{"m-1"}, body: payBody})
	for _, rq := range []request{
		{keys: []string{"m-1"}, body: `{"amount":9999,"currency":"EUR"}`},
		{keys: []string{"m-1"}, body: payBody, method: http.MethodPatch},
		{keys: []string{"m-1"}, body: payBody, path: "/payments?x=1"},
	} {
		r := b.do(t, rq)
		if r.status != http.StatusUnprocessableEntity || problemCode(t, r) != idempotency.CodeKeyReused {
			t.Fatalf("%+v: %d %s", rq, r.status, r.body)
		}
	}
	again := b.do(t, request{keys: []string{"m-1"}, body: payBody})
	if !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("stored result changed: %s vs %s", again.body, first.body)
	}
	if got := b.app.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{RequireKey: func(r *http.Request) bool { return r.URL.Query().Has("strict") }})
	for _, path := range []string{"/required", "/payments?strict"} {
		r := b.do(t, request{path: path, body: payBody})
		if r.status != http.StatusBadRequest || problemCode(t, r) != idempotency.CodeKeyMissing {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	if got := b.app.calls.Load(); got != 0 {
		t.Fatalf("handler ran %d times, want 0", got)
	}
	// Without a key on a route that does not require one, the request passes through, with no
	// transaction: the test app answers 500 "no transaction".
	r := b.do(t, request{body: payBody})
	if r.status != http.StatusInternalServerError || !strings.Contains(string(r.body), "no transaction") {
		t.Fatalf("pass-through: %d %s", r.status, r.body)
	}
	// A method not covered passes through even with a key.
	r = b.do(t, request{method: http.MethodPut, keys: []string{"put-1"}, body: payBody})
	if r.status != http.StatusInternalServerError {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if got := b.count(t, "idempotency_keys"); got != 0 {
		t.Fatalf("%d keys stored, want 0", got)
	}
}

func TestMalformedKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range parseCases {
		if tc.err == nil || tc.values == nil {
			continue // no header at all passes through on a route that does not require one
		}
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/payments", strings.NewReader(payBody))
			req.Header.Set("X-Client-Id", "client-a")
			for _, v := range tc.values {
				req.Header.Add(idempotency.HeaderKey, v)
			}
			rec := httptest.NewRecorder()
			b.srv.Config.Handler.ServeHTTP(rec, req)
			r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d, body %s", r.status, r.body)
			}
			if code := problemCode(t, r); code != idempotency.CodeKeyInvalid && code != idempotency.CodeKeyMissing {
				t.Fatalf("code %q", code)
			}
		})
	}
	// The same over the wire, for the values a client can send.
	for _, keys := range [][]string{{`""`}, {"a", "b"}, {`"a", "b"`}, {"a;p=1"}, {strings.Repeat("x", 256)}, {`"open`}, {"a b"}} {
		r := b.do(t, request{keys: keys, body: payBody})
		if r.status != http.StatusBadRequest || problemCode(t, r) != idempotency.CodeKeyInvalid {
			t.Fatalf("%q: %d %s", keys, r.status, r.body)
		}
	}
	if got := b.app.calls.Load(); got != 0 {
		t.Fatalf("handler ran %d times, want 0", got)
	}
	if got := b.count(t, "idempotency_keys"); got != 0 {
		t.Fatalf("%d keys stored, want 0", got)
	}
}

func TestCrossClientIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.do(t, request{client: "alice", keys: []string{"same"}, body: payBody})
	b1 := b.do(t, request{client: "bob", keys: []string{"same"}, body: payBody})
	if a1.replayed() || b1.replayed() || bytes.Equal(a1.body, b1.body) {
		t.Fatalf("clients shared a response: %s / %s", a1.body, b1.body)
	}
	a2 := b.do(t, request{client: "alice", keys: []string{"same"}, body: payBody})
	b2 := b.do(t, request{client: "bob", keys: []string{"same"}, body: payBody})
	if !bytes.Equal(a2.body, a1.body) || !bytes.Equal(b2.body, b1.body) || !a2.replayed() || !b2.replayed() {
		t.Fatalf("replays crossed clients: alice %s->%s, bob %s->%s", a1.body, a2.body, b1.body, b2.body)
	}
	if got := b.app.calls.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
	// Neither the raw key nor the client is stored.
	var n int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.schema+".idempotency_keys WHERE position('same'::bytea in key_hash) > 0 OR position('alice'::bytea in key_hash) > 0").Scan(&n); err != nil || n != 0 {
		t.Fatalf("raw key stored? n=%d err=%v", n, err)
	}
}

func TestNoPrincipalGives401(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/payments", strings.NewReader(payBody))
	req.Header.Set(idempotency.HeaderKey, "k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", res.StatusCode)
	}
}

// TestEmptyPrincipalIsRefused: a Principal that returns "" without an error (here: an
// authentication layer that lets anonymous callers through) must not put those callers into one
// shared key space, where bob would be replayed alice's payment.
func TestEmptyPrincipalIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{Principal: func(r *http.Request) (string, error) {
		return r.Header.Get("X-Api-User"), nil // no such header: "" for every caller
	}})
	alice := b.do(t, request{client: "alice", keys: []string{"pay-1"}, body: payBody})
	bob := b.do(t, request{client: "bob", keys: []string{"pay-1"}, body: payBody})
	// bob first: before the fix he was replayed alice's payment.
	for _, c := range []struct {
		name string
		r    response
	}{{"bob", bob}, {"alice", alice}} {
		name, r := c.name, c.r
		if r.status != http.StatusUnauthorized {
			t.Fatalf("%s: status %d replayed=%v %s; want 401 for an empty principal", name, r.status, r.replayed(), r.body)
		}
		if code := problemCode(t, r); code != idempotency.CodeUnauthenticated {
			t.Fatalf("%s: problem code %q, want %q", name, code, idempotency.CodeUnauthenticated)
		}
	}
	if got := b.app.calls.Load(); got != 0 {
		t.Fatalf("handler ran %d times for callers without a principal, want 0", got)
	}
	if got := b.count(t, "idempotency_keys"); got != 0 {
		t.Fatalf("%d keys stored for callers without a principal, want 0", got)
	}
}

func TestOnlyAllowListedHeadersReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.do(t, request{keys: []string{"h-1"}, body: payBody})
	if first.header.Get("Set-Cookie") == "" || first.header.Get("X-Not-Replayed") == "" {
		t.Fatalf("the first response lacks the handler's headers: %v", first.header)
	}
	again := b.do(t, request{keys: []string{"h-1"}, body: payBody})
	for _, h := range []string{"Set-Cookie", "X-Not-Replayed"} {
		if v := again.header.Values(h); len(v) != 0 {
			t.Fatalf("replay carries %s: %q", h, v)
		}
	}
	if again.header.Get("Location") == "" || again.header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay lost allow-listed headers: %v", again.header)
	}
}

func TestKeyPastTTLRunsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.do(t, request{keys: []string{"ttl-1"}, body: payBody})
	// Age the row past the TTL by the database's clock.
	b.age(t, fmt.Sprintf("%d seconds", int(b.mw.TTL().Seconds())+1), "")
	// A different body too: an expired key is a new request, not a mismatch.
	second := b.do(t, request{keys: []string{"ttl-1"}, body: `{"amount":7,"currency":"USD"}`})
	if second.status != http.StatusCreated || second.replayed() || bytes.Equal(second.body, first.body) {
		t.Fatalf("expired key: %d replayed=%v %s", second.status, second.replayed(), second.body)
	}
	third := b.do(t, request{keys: []string{"ttl-1"}, body: `{"amount":7,"currency":"USD"}`})
	if !third.replayed() || !bytes.Equal(third.body, second.body) {
		t.Fatalf("after renewal: replayed=%v %s", third.replayed(), third.body)
	}
	if got := b.app.calls.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.do(t, request{keys: []string{"old"}, body: payBody})
	b.do(t, request{keys: []string{"new"}, body: payBody})
	b.age(t, "25 hours", "ctid = (SELECT min(ctid) FROM "+b.schema+".idempotency_keys)")
	res, err := b.mw.Purge(t.Context())
	if err != nil || res.Deleted != 1 || res.Skipped {
		t.Fatalf("Purge = %+v, %v", res, err)
	}
	if got := b.count(t, "idempotency_keys"); got != 1 {
		t.Fatalf("%d keys left, want 1", got)
	}
	if _, err := idempotency.PurgeExpired(t.Context(), b.pool, b.schema, time.Hour, 0, nil); err == nil {
		t.Fatal("PurgeExpired accepted an age under MinTTL")
	}
	var batches []int64
	res, err = idempotency.PurgeExpired(t.Context(), b.pool, b.schema, idempotency.MinTTL, 0, func(n int64) { batches = append(batches, n) })
	if err != nil || res.Deleted != 0 || len(batches) != 1 {
		t.Fatalf("PurgeExpired = %+v, %v, progress %v", res, err, batches)
	}
}

// TestPurgeKeepsEachKeyForItsOwnTTL: a key stored by a middleware with a 72-hour TTL is replayed
// for 72 hours, so no purge may delete it after 24: not PurgeExpired as the CLI runs it (with the
// minimum TTL as its floor), nor the purge of a middleware whose own TTL is the default.
func TestPurgeKeepsEachKeyForItsOwnTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{TTL: 72 * time.Hour})
	first := b.do(t, request{keys: []string{"long"}, body: payBody})
	// The key was created 25 hours ago, by the database's clock.
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+b.schema+".idempotency_keys SET created_at = created_at - interval '25 hours'"); err != nil {
		t.Fatal(err)
	}
	if res, err := idempotency.PurgeExpired(t.Context(), b.pool, b.schema, idempotency.MinTTL, 0, nil); err != nil || res.Deleted != 0 {
		t.Fatalf("PurgeExpired(MinTTL) = %+v, %v: it deleted a key 25 hours into its 72-hour TTL", res, err)
	}
	short, err := idempotency.New(b.pool, &idempotency.Config{Schema: b.schema, Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := short.Purge(t.Context()); err != nil || res.Deleted != 0 {
		t.Fatalf("the purge of a 24-hour middleware = %+v, %v: it deleted a key 25 hours into its 72-hour TTL", res, err)
	}
	again := b.do(t, request{keys: []string{"long"}, body: payBody})
	if !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("within its TTL: %d replayed=%v %s", again.status, again.replayed(), again.body)
	}
	// Once its own expiry has passed, it goes.
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+b.schema+".idempotency_keys SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if res, err := idempotency.PurgeExpired(t.Context(), b.pool, b.schema, idempotency.MinTTL, 0, nil); err != nil || res.Deleted != 1 {
		t.Fatalf("PurgeExpired after the expiry = %+v, %v; want the key deleted", res, err)
	}
}

func TestFailedAttemptRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	fail := "panic"
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		switch fail {
		case "panic":
			panic("boom")
		case "5xx":
			http.Error(w, "upstream down", http.StatusBadGateway)
			return true
		}
		return false
	}
	r := b.do(t, request{keys: []string{"f-1"}, body: payBody})
	if r.status != http.StatusInternalServerError || problemCode(t, r) != idempotency.CodeInternal {
		t.Fatalf("panic: %d %s", r.status, r.body)
	}
	fail = "5xx"
	r = b.do(t, request{keys: []string{"f-1"}, body: payBody})
	if r.status != http.StatusBadGateway || r.replayed() {
		t.Fatalf("5xx: %d %s", r.status, r.body)
	}
	if got := b.count(t, "payments") + b.count(t, "idempotency_keys"); got != 0 {
		t.Fatalf("a failed attempt left %d rows", got)
	}
	fail = ""
	r = b.do(t, request{keys: []string{"f-1"}, body: payBody})
	if r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	if got := b.app.calls.Load(); got != 3 {
		t.Fatalf("handler ran %d times, want 3", got)
	}
	if got := b.count(t, "payments"); got != 1 {
		t.Fatalf("%d payments, want 1", got)
	}
}

func TestResponseTooLargeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{MaxResponseBytes: 64})
	var writeErr error
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusCreated)
		_, writeErr = w.Write(bytes.Repeat([]byte("x"), 100))
		return true
	}
	r := b.do(t, request{keys: []string{"big"}, body: payBody})
	if r.status != http.StatusInternalServerError || problemCode(t, r) != idempotency.CodeResponseTooLarge {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !errors.Is(writeErr, idempotency.ErrResponseTooLarge) {
		t.Fatalf("Write error %v", writeErr)
	}
	if got := b.count(t, "payments") + b.count(t, "idempotency_keys"); got != 0 {
		t.Fatalf("a refused response left %d rows", got)
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{MaxBodyBytes: 16})
	r := b.do(t, request{keys: []string{"big"}, body: payBody})
	if r.status != http.StatusRequestEntityTooLarge || problemCode(t, r) != idempotency.CodeBodyTooLarge {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// Unknown length (chunked): the limit holds while reading.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/payments", struct{ *strings.Reader }{strings.NewReader(payBody)})
	req.Header.Set("X-Client-Id", "client-a")
	req.Header.Set(idempotency.HeaderKey, "big")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Fatalf("chunked: %d (length %d)", res.StatusCode, req.ContentLength)
	}
	if b.app.calls.Load() != 0 || b.count(t, "idempotency_keys") != 0 {
		t.Fatal("an oversized request was processed or stored")
	}
}

func TestRetryDuringAttemptGets409ThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failing test must not leave the handler blocked
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		close(entered)
		<-release
		return false
	}
	done := make(chan response, 1)
	go func() {
		r, _ := b.try(context.Background(), request{keys: []string{"slow"}, body: payBody})
		done <- r
	}()
	<-entered
	r := b.do(t, request{keys: []string{"slow"}, body: payBody})
	if r.status != http.StatusConflict || r.header.Get("Retry-After") != "1" || problemCode(t, r) != idempotency.CodeKeyInFlight {
		t.Fatalf("during: %d %v %s", r.status, r.header, r.body)
	}
	// A retry with a different body while in flight is also told to wait, not run.
	if r := b.do(t, request{keys: []string{"slow"}, body: `{"amount":1,"currency":"EUR"}`}); r.status != http.StatusConflict {
		t.Fatalf("different body during: %d", r.status)
	}
	releaseOnce()
	first := <-done
	again := b.do(t, request{keys: []string{"slow"}, body: payBody})
	if first.status != http.StatusCreated || !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("after: first %d %s, again %s", first.status, first.body, again.body)
	}
}

func TestLeaseEndsASlowAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{Lease: 300 * time.Millisecond})
	slow := true
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		if slow {
			<-r.Context().Done()
		}
		return false
	}
	r := b.do(t, request{keys: []string{"lease"}, body: payBody})
	if r.status != http.StatusServiceUnavailable || problemCode(t, r) != idempotency.CodeLeaseExpired {
		t.Fatalf("%d %s", r.status, r.body)
	}
	slow = false
	r = b.do(t, request{keys: []string{"lease"}, body: payBody})
	if r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	if got := b.count(t, "payments"); got != 1 {
		t.Fatalf("%d payments, want 1", got)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	p := sharedPool(t)
	for _, tc := range []struct {
		field string
		cfg   idempotency.Config
	}{
		{"Principal", idempotency.Config{}},
		{"Schema", idempotency.Config{Principal: principal, Schema: "Bad-Name"}},
		{"TTL", idempotency.Config{Principal: principal, TTL: time.Hour}},
		{"Lease", idempotency.Config{Principal: principal, Lease: -time.Second}},
		{"Wait", idempotency.Config{Principal: principal, Lease: time.Second, Wait: 2 * time.Second}},
		{"ReplayHeaders", idempotency.Config{Principal: principal, ReplayHeaders: []string{"set-cookie"}}},
		{"Methods", idempotency.Config{Principal: principal, Methods: []string{"post"}}},
		{"MaxBodyBytes", idempotency.Config{Principal: principal, MaxBodyBytes: -1}},
		{"MaxResponseBytes", idempotency.Config{Principal: principal, MaxResponseBytes: -1}},
		{"RetryAfter", idempotency.Config{Principal: principal, RetryAfter: -1}},
		{"PurgeInterval", idempotency.Config{Principal: principal, PurgeInterval: -1}},
		{"PurgeBatchSize", idempotency.Config{Principal: principal, PurgeBatchSize: -1}},
	} {
		_, err := idempotency.New(p, &tc.cfg)
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("%s: err = %v", tc.field, err)
		}
	}
	if _, err := idempotency.New(p, &idempotency.Config{Principal: principal}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	mw, _ := idempotency.New(p, &idempotency.Config{Principal: principal, Schema: "not_migrated"})
	if err := mw.Check(t.Context()); err == nil {
		t.Fatal("Check passed on an unmigrated schema")
	}
}

func TestCheckNeedsEveryMigration(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Down to 0002: 0004 and later are the inbox's, 0003 the keys' expiry. The steps come from
	// the embedded list, so that a new migration needs no edit here.
	st, err := inbox.Migrations(t.Context(), b.pool, b.schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.MigrateDown(t.Context(), b.pool, b.schema, len(st)-2); err != nil {
		t.Fatal(err)
	}
	if err := b.mw.Check(t.Context()); !errors.Is(err, idempotency.ErrNotMigrated) || !strings.Contains(err.Error(), "expires_at") {
		t.Fatalf("Check without migration 0003 = %v; want ErrNotMigrated naming expires_at", err)
	}
	if _, err := inbox.Migrate(t.Context(), b.pool, b.schema); err != nil {
		t.Fatal(err)
	}
	if err := b.mw.Check(t.Context()); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
}

func TestRetryWaitingForTheAttemptReplaysIt(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{Wait: 20 * time.Second})
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failing test must not leave the handler blocked
	b.app.hook = func(w http.ResponseWriter, r *http.Request) bool {
		close(entered)
		<-release
		return false
	}
	firstDone := make(chan response, 1)
	go func() {
		r, _ := b.try(context.Background(), request{keys: []string{"wait"}, body: payBody})
		firstDone <- r
	}()
	<-entered
	retryDone := make(chan response, 1)
	go func() {
		r, _ := b.try(context.Background(), request{keys: []string{"wait"}, body: payBody})
		retryDone <- r
	}()
	// Release the first attempt only once the retry waits on its row.
	eventually(t, 30*time.Second, "the retry to wait on the key's row lock", func() bool {
		var n int
		err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "+
			"AND wait_event_type = 'Lock' AND strpos(query, $1) > 0", b.schema).Scan(&n)
		return err == nil && n > 0
	})
	releaseOnce()
	first, retry := <-firstDone, <-retryDone
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if retry.status != http.StatusCreated || !retry.replayed() || !bytes.Equal(retry.body, first.body) {
		t.Fatalf("the waiting retry got %d replayed=%v %s", retry.status, retry.replayed(), retry.body)
	}
	if got := b.app.calls.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}

func TestPurgeLoop(t *testing.T) {
	t.Parallel()
	b := setup(t, &idempotency.Config{PurgeInterval: time.Hour})
	b.do(t, request{keys: []string{"old"}, body: payBody})
	b.age(t, "25 hours", "")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.mw.PurgeLoop(ctx) }()
	eventually(t, 30*time.Second, "the purge loop's first run", func() bool { return b.count(t, "idempotency_keys") == 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PurgeLoop returned %v", err)
	}
}

func TestConcurrentRetriesOfAnExpiredKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	old := b.do(t, request{keys: []string{"exp"}, body: payBody})
	b.age(t, "25 hours", "")
	const n = 30
	responses := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { responses[i] = b.do(t, request{keys: []string{"exp"}, body: payBody}) })
	}
	wg.Wait()
	var fresh []byte
	for _, r := range responses {
		switch {
		case r.status == http.StatusCreated && !r.replayed():
			if fresh != nil {
				t.Fatal("the expired key ran twice")
			}
			fresh = r.body
		case r.status == http.StatusCreated || r.status == http.StatusConflict:
		default:
			t.Fatalf("status %d %s", r.status, r.body)
		}
		if bytes.Equal(r.body, old.body) {
			t.Fatal("an expired response was replayed")
		}
	}
	for _, r := range responses {
		if r.replayed() && !bytes.Equal(r.body, fresh) {
			t.Fatalf("replay %s is not the new response %s", r.body, fresh)
		}
	}
	if got := b.app.calls.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// The console's tests run `sqsinbox console` in-process on a free loopback port, against the
// PostgreSQL and the SQS server of the pass (GoAws or fauxqs, see main_test.go), and speak HTTP
// to it as a browser would; console_browser_test.go drives a real browser.

// testToken is the console token of the tests that enable actions.
const testToken = "s3cret-console-token-0123456789"

// testConsole is a running console.
type testConsole struct {
	t      *testing.T
	url    string // http://127.0.0.1:PORT
	port   string
	stderr *lockedBuffer
	client *http.Client
}

// lockedBuffer is the console's stderr, written by its handlers while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startConsole runs `sqsinbox console --listen 127.0.0.1:0 ARGS...` until the test ends, and
// waits for the line that gives its address. At the end it checks that the console stopped
// cleanly and never wrote the test token to its log.
func startConsole(t *testing.T, args ...string) *testConsole {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &lockedBuffer{}
	stderr := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr},
			append([]string{"console", "--listen", "127.0.0.1:0"}, args...))
	}()
	addr := regexp.MustCompile(`http://127\.0\.0\.1:(\d+)/`)
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var m []string
	for m == nil {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("the console exited %d before serving\nstdout: %s\nstderr: %s", code, stdout, stderr)
		case <-deadline.C:
			cancel()
			t.Fatalf("the console gave no address within 60 s\nstdout: %s\nstderr: %s", stdout, stderr)
		case <-tick.C:
			m = addr.FindStringSubmatch(stdout.String())
		}
	}
	tc := &testConsole{t: t, url: strings.TrimSuffix(m[0], "/"), port: m[1], stderr: stderr,
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("the console exited %d when stopped\nstderr: %s", code, stderr)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("the console did not stop within 60 s")
		}
		if strings.Contains(stdout.String()+stderr.String(), testToken) {
			t.Errorf("the console wrote its token to its output:\n%s\n%s", stdout, stderr)
		}
	})
	return tc
}

// response is an answer, read whole.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request with the given headers (Host sets the Host header).
func (tc *testConsole) do(method, path string, form url.Values, headers map[string]string) response {
	tc.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(tc.t.Context(), method, tc.url+path, body)
	if err != nil {
		tc.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := tc.client.Do(req)
	if err != nil {
		tc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tc.t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func (tc *testConsole) get(path string) response { return tc.do(http.MethodGet, path, nil, nil) }

// post sends a form as the console's own page does: with its Origin, and the session cookie
// when one is given.
func (tc *testConsole) post(path string, form url.Values, session *http.Cookie) response {
	tc.t.Helper()
	h := map[string]string{"Origin": tc.url}
	if session != nil {
		h["Cookie"] = session.String()
	}
	return tc.do(http.MethodPost, path, form, h)
}

// peek presses the DLQ page's Peek button of queue: a POST from the console's own page, with the
// session cookie when one is given.
func (tc *testConsole) peek(queue string, session *http.Cookie) response {
	tc.t.Helper()
	return tc.post("/dlq", url.Values{"csrf": {tc.csrf("/dlq?queue=" + url.QueryEscape(queue))}, "queue": {queue}}, session)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the console's forms, read from the first page of pages (by default
// /login, then /) that has a form.
func (tc *testConsole) csrf(pages ...string) string {
	tc.t.Helper()
	if len(pages) == 0 {
		pages = []string{"/login", "/"} // a read-only console has no login form
	}
	for _, p := range pages {
		if m := csrfField.FindStringSubmatch(tc.get(p).body); m != nil {
			return m[1]
		}
	}
	tc.t.Fatalf("no CSRF field on %v", pages)
	return ""
}

// login signs in with the token and returns the session cookie.
func (tc *testConsole) login() *http.Cookie {
	tc.t.Helper()
	r := tc.post("/login", url.Values{"csrf": {tc.csrf()}, "token": {testToken}}, nil)
	if r.status != http.StatusSeeOther {
		tc.t.Fatalf("sign in: status %d; want 303\n%s", r.status, r.body)
	}
	for _, ck := range (&http.Response{Header: r.header}).Cookies() {
		if ck.Name == "sqsinbox_console_"+tc.port && ck.Value != "" {
			if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
				tc.t.Fatalf("session cookie %q: want HttpOnly, SameSite=Strict, Path=/", ck.String())
			}
			if strings.Contains(ck.Value, testToken) {
				tc.t.Fatalf("the session cookie holds the token")
			}
			return ck
		}
	}
	tc.t.Fatalf("sign in set no session cookie: %v", r.header.Values("Set-Cookie"))
	return nil
}

// processEvent runs the inbox's own claim for handler and key in schema: the row an event's
// processing leaves, made the way a worker makes it.
func processEvent(t *testing.T, pool *pgxpool.Pool, schema, handler, key string) {
	t.Helper()
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Instance: "ip-10-0-1-17.ec2.internal"})
	if err != nil {
		t.Fatal(err)
	}
	d := inbox.Delivery{MessageID: "6f1c9a2e-3b7d-4e85-9c10-2a4b6d8e0f13", Queue: handler, ReceiveCount: 1,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	out, err := ib.Run(inbox.WithDelivery(t.Context(), d), handler, key, func(context.Context, pgx.Tx) error { return nil })
	if err != nil || out != inbox.Processed {
		t.Fatalf("process %s for %s: %v, %v; want processed", key, handler, out, err)
	}
}

// parkedOf is how many of the outbox messages ids are parked.
func parkedOf(t *testing.T, pool *pgxpool.Pool, schema string, ids []int64) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.outbox_messages WHERE parked_at IS NOT NULL AND id = ANY($1)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantSecurityHeaders checks the headers every answer carries.
func wantSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, v := range map[string]string{
		"Content-Security-Policy": "default-src 'self'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	} {
		if !strings.Contains(h.Get(k), v) {
			t.Errorf("%s: %s is %q; want %q", what, k, h.Get(k), v)
		}
	}
}

// dlqWithEvents makes a queue with a DLQ that holds a message for each body (sent with `sqsinbox
// send`, so with event_id attributes where the body has an id).
func dlqWithEvents(t *testing.T, prefix string, bodies ...string) *sqstest.Queue {
	t.Helper()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 3})
	cli(t, strings.Join(bodies, "\n"), "send", "--queue", lastPart(q.DLQURL), "--allow-no-key").mustOK(t)
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, len(bodies), 30*time.Second)
	return q
}

// keysIn receives n messages from the queue and returns their event_id attributes, sorted.
func keysIn(t *testing.T, queueURL string, n int) []string {
	return attributesIn(t, queueURL, n, "event_id")
}

// attributesIn receives n messages from the queue and returns their String attribute name, sorted.
func attributesIn(t *testing.T, queueURL string, n int, name string) []string {
	t.Helper()
	var got []string
	for _, m := range receiveAll(t, queueURL, n) {
		got = append(got, aws.ToString(m.MessageAttributes[name].StringValue))
	}
	slices.Sort(got)
	return got
}

func queueCount(t *testing.T, queueURL string) int {
	t.Helper()
	n, err := sqstest.Count(t.Context(), srv.Client(), queueURL)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConsoleHostCheck (PostgreSQL): a request whose Host is not 127.0.0.1, localhost or [::1]
// at the console's port, or an --allow-host name, is refused with 421 before any page runs (DNS
// rebinding); every answer, refusals too, has the security headers.
func TestConsoleHostCheck(t *testing.T) {
	t.Parallel()
	_, dbArgs := migratedSchema(t, "cli_conhost")
	tc := startConsole(t, append([]string{"--allow-host", "console.internal"}, dbArgs...)...)
	for _, tc2 := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + tc.port, http.StatusOK},
		{"localhost:" + tc.port, http.StatusOK},
		{"LOCALHOST:" + tc.port, http.StatusOK},
		{"[::1]:" + tc.port, http.StatusOK},
		{"console.internal", http.StatusOK},
		{"console.internal:" + tc.port, http.StatusOK},
		{"attacker.example:" + tc.port, http.StatusMisdirectedRequest},
		{"attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1:1", http.StatusMisdirectedRequest},
		{"localhost.attacker.example:" + tc.port, http.StatusMisdirectedRequest},
	} {
		r := tc.do(http.MethodGet, "/", nil, map[string]string{"Host": tc2.host})
		if r.status != tc2.want {
			t.Errorf("Host %q: status %d; want %d\n%.300s", tc2.host, r.status, tc2.want, r.body)
		}
		wantSecurityHeaders(t, "Host "+tc2.host, r.header)
	}
	// A POST to a rebound name is refused the same way, before its form is read.
	r := tc.do(http.MethodPost, "/login", url.Values{"token": {testToken}}, map[string]string{"Host": "attacker.example:" + tc.port, "Origin": "http://attacker.example:" + tc.port})
	if r.status != http.StatusMisdirectedRequest || r.header.Get("Set-Cookie") != "" {
		t.Errorf("POST with a rebound Host: status %d, Set-Cookie %q; want 421 and none", r.status, r.header.Get("Set-Cookie"))
	}
	// The 421 page says where the console is: its real port, and the names it answers to.
	r = tc.do(http.MethodGet, "/", nil, map[string]string{"Host": "attacker.example:" + tc.port})
	for _, want := range []string{"http://127.0.0.1:" + tc.port + "/", "http://localhost:" + tc.port + "/", "console.internal:" + tc.port, "--allow-host NAME"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the 421 page lacks %q:\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, "PORT") {
		t.Errorf("the 421 page says PORT, not the port:\n%s", r.body)
	}
	if !strings.Contains(tc.stderr.String(), `Host "attacker.example:`+tc.port+`" is not one it answers to`) {
		t.Errorf("the refusal is not logged:\n%s", tc.stderr)
	}
	r = tc.get("/static/console.css")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: status %d, %q", r.status, r.header.Get("Content-Type"))
	}
	wantSecurityHeaders(t, "stylesheet", r.header)
}

// TestConsoleEventLookup (PostgreSQL): the lookup finds an event processed in the test by the
// inbox's claim, says when a key was processed by none, keeps a hostile key as data (bound as a
// parameter: the table is still there), and refuses keys past the key limit, with a NUL or not
// UTF-8 with a 400 that says why. What the page echoes is escaped.
func TestConsoleEventLookup(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_conlookup")
	schema := dbArgs[len(dbArgs)-1]
	processEvent(t, pool, schema, "warehouse", "evt_console_1")
	processEvent(t, pool, schema, "loyalty", "evt_console_1")
	tc := startConsole(t, dbArgs...)

	r := tc.get("/?key=evt_console_1")
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="lookup-result"`) ||
		!strings.Contains(r.body, "<td class=\"mono\">warehouse</td>") || !strings.Contains(r.body, "<td class=\"mono\">loyalty</td>") {
		t.Fatalf("lookup of a processed event: status %d\n%s", r.status, r.body)
	}
	wantSecurityHeaders(t, "lookup", r.header)
	r = tc.get("/?key=evt_never")
	if r.status != http.StatusOK || !strings.Contains(r.body, "not processed by any handler") {
		t.Errorf("lookup of an event never processed: status %d\n%s", r.status, r.body)
	}
	hostile := `x'); DROP TABLE ` + schema + `.processed_messages; --`
	r = tc.get("/?key=" + url.QueryEscape(hostile))
	if r.status != http.StatusOK || !strings.Contains(r.body, "not processed by any handler") {
		t.Errorf("lookup of a hostile key: status %d\n%s", r.status, r.body)
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.processed_messages`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("after the hostile key processed_messages has %d rows (%v); want the 2 made above", rows, err)
	}
	r = tc.get("/?key=" + url.QueryEscape(`<script>alert("k")</script>`))
	if strings.Contains(r.body, `<script>alert`) || !strings.Contains(r.body, `&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;`) {
		t.Errorf("the key is echoed unescaped:\n%s", r.body)
	}
	for _, tc2 := range []struct{ raw, want string }{
		{"key=" + strings.Repeat("k", inbox.MaxKeyLen+88), "too long (600 bytes, at most 512 allowed)"},
		{"key=a%00b", "contains a NUL byte"},
		{"key=%ff%fe", "not valid UTF-8"},
		{"key=", "empty"},
		{"key=%zz", "not valid URL encoding"},
	} {
		r := tc.get("/?" + tc2.raw)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, tc2.want) {
			t.Errorf("lookup %.40s: status %d; want 400 and %q\n%.2000s", tc2.raw, r.status, tc2.want, r.body)
		}
	}
}

// TestConsoleReadOnlyWithoutToken (the SQS server and PostgreSQL): started without a token the
// console shows everything, and refuses every action (redrive, retry, sign-in) with 403, even
// one with the right CSRF token and Origin: the DLQ, the queue and the outbox are as they were.
func TestConsoleReadOnlyWithoutToken(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_conro")
	schema := dbArgs[len(dbArgs)-1]
	parked := seedOutbox(t, pool, schema)
	q := dlqWithEvents(t, "cli-conro", `{"id":"evt_ro_1"}`, `{"id":"evt_ro_2"}`)
	tc := startConsole(t, append([]string{"--queue", q.Name}, dbArgs...)...)

	r := tc.get("/")
	for _, want := range []string{`id="mode">read-only`, q.Name, lastPart(q.DLQURL), "QueueDoesNotExist", `id="outbox-parked">3<`,
		"not shown: the workers do not report it through the database yet"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("overview lacks %q:\n%s", want, r.body)
		}
	}
	csrf := tc.csrf()
	for _, p := range []struct {
		path string
		form url.Values
	}{
		{"/redrive", url.Values{"csrf": {csrf}, "queue": {q.Name}, "handler": {"warehouse"}, "mode": {"run"}, "token": {testToken}}},
		{"/outbox/retry", url.Values{"csrf": {csrf}, "all": {"1"}}},
		{"/login", url.Values{"csrf": {csrf}, "token": {testToken}}},
	} {
		r := tc.post(p.path, p.form, nil)
		if r.status != http.StatusForbidden || !strings.Contains(r.body, "read-only") || r.header.Get("Set-Cookie") != "" {
			t.Errorf("POST %s on a read-only console: status %d; want 403 saying read-only\n%s", p.path, r.status, r.body)
		}
	}
	if n := queueCount(t, q.URL); n != 0 {
		t.Errorf("the queue holds %d after refused redrives; want 0", n)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	if n := parkedOf(t, pool, schema, parked); n != 3 {
		t.Errorf("parked after a refused retry: %d; want 3", n)
	}
}

// TestConsoleRefusesPOSTWithoutTokenAndCSRF (the SQS server and PostgreSQL): with a token set,
// a redrive or a retry is refused with 403 when it lacks the token (no session, a wrong one, a
// wrong token field), the CSRF token (missing, wrong), or a same-origin Origin or Referer; a GET
// never acts. After all of them the DLQ, the queue and the outbox are unchanged; the same
// request with everything right then works.
func TestConsoleRefusesPOSTWithoutTokenAndCSRF(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_concsrf")
	schema := dbArgs[len(dbArgs)-1]
	parked := seedOutbox(t, pool, schema)
	q := dlqWithEvents(t, "cli-concsrf", `{"id":"evt_cs_1"}`, `{"id":"evt_cs_2"}`)
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)

	if r := tc.get("/"); !strings.Contains(r.body, `id="mode">signed out`) || !strings.Contains(r.body, "disabled") {
		t.Errorf("overview before sign-in: want signed out, buttons disabled\n%s", r.body)
	}
	csrf := tc.csrf()
	// A wrong token at the login form sets nothing.
	r := tc.post("/login", url.Values{"csrf": {csrf}, "token": {"not-the-token-at-all"}}, nil)
	if r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" || !strings.Contains(r.body, "not the console") {
		t.Errorf("sign in with a wrong token: status %d, Set-Cookie %q; want 403 and none", r.status, r.header.Get("Set-Cookie"))
	}
	session := tc.login()
	forged := &http.Cookie{Name: session.Name, Value: strings.Repeat("0", len(session.Value))}
	redrive := url.Values{"csrf": {csrf}, "queue": {q.Name}, "handler": {"warehouse"}, "mode": {"run"}}
	retry := url.Values{"csrf": {csrf}, "all": {"1"}}
	with := func(v url.Values, k, val string) url.Values {
		c := url.Values{}
		for kk, vv := range v {
			c[kk] = slices.Clone(vv)
		}
		if val == "" {
			c.Del(k)
		} else {
			c.Set(k, val)
		}
		return c
	}
	origin := map[string]string{"Origin": tc.url}
	cookie := func(ck *http.Cookie, h map[string]string) map[string]string {
		out := map[string]string{"Cookie": ck.String()}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	for _, c := range []struct {
		name    string
		path    string
		form    url.Values
		headers map[string]string
		want    string
	}{
		{"no session", "/redrive", redrive, origin, "not signed in"},
		{"forged session", "/redrive", redrive, cookie(forged, origin), "not signed in"},
		{"wrong token field", "/redrive", with(redrive, "token", "s3cret-console-token-0123456788"), origin, "not signed in"},
		{"no CSRF", "/redrive", with(redrive, "csrf", ""), cookie(session, origin), "CSRF token is missing"},
		{"wrong CSRF", "/redrive", with(redrive, "csrf", csrf[:len(csrf)-1]+"x"), cookie(session, origin), "CSRF token is missing"},
		{"CSRF and token, no session", "/redrive", with(redrive, "csrf", ""), map[string]string{"Origin": tc.url}, "CSRF"},
		{"cross-site Origin", "/redrive", redrive, cookie(session, map[string]string{"Origin": "http://attacker.example"}), "did not come from this console"},
		{"null Origin", "/redrive", redrive, cookie(session, map[string]string{"Origin": "null"}), "did not come from this console"},
		{"other port Origin", "/redrive", redrive, cookie(session, map[string]string{"Origin": "http://127.0.0.1:1"}), "did not come from this console"},
		{"cross-site Referer", "/redrive", redrive, cookie(session, map[string]string{"Referer": "http://attacker.example/x"}), "did not come from this console"},
		{"no Origin or Referer", "/redrive", redrive, cookie(session, nil), "did not come from this console"},
		{"retry, no session", "/outbox/retry", retry, origin, "not signed in"},
		{"retry, no CSRF", "/outbox/retry", with(retry, "csrf", ""), cookie(session, origin), "CSRF"},
		{"retry, cross-site", "/outbox/retry", retry, cookie(session, map[string]string{"Origin": "http://attacker.example"}), "did not come from this console"},
		{"sign in, no CSRF", "/login", url.Values{"token": {testToken}}, origin, "CSRF"},
		{"sign in, cross-site", "/login", url.Values{"csrf": {csrf}, "token": {testToken}}, map[string]string{"Origin": "http://attacker.example"}, "did not come from this console"},
		{"Sec-Fetch-Site cross-site", "/redrive", redrive, cookie(session, map[string]string{"Origin": tc.url, "Sec-Fetch-Site": "cross-site"}), "did not come from this console"},
		{"Sec-Fetch-Site same-site", "/outbox/retry", retry, cookie(session, map[string]string{"Referer": tc.url + "/", "Sec-Fetch-Site": "same-site"}), "did not come from this console"},
	} {
		r := tc.do(http.MethodPost, c.path, c.form, c.headers)
		if r.status != http.StatusForbidden || !strings.Contains(r.body, c.want) || r.header.Get("Set-Cookie") != "" {
			t.Errorf("%s: status %d; want 403 with %q and no cookie\n%.3000s", c.name, r.status, c.want, r.body)
		}
		wantSecurityHeaders(t, c.name, r.header)
	}
	// State never changes on GET.
	for _, p := range []string{"/redrive?" + redrive.Encode(), "/outbox/retry?all=1"} {
		if r := tc.do(http.MethodGet, p, nil, cookie(session, origin)); r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: status %d; want 405", p, r.status)
		}
	}
	if n := queueCount(t, q.URL); n != 0 {
		t.Fatalf("the queue holds %d after refused redrives; want 0", n)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	if n := parkedOf(t, pool, schema, parked); n != 3 {
		t.Fatalf("parked after refused retries: %d; want 3", n)
	}

	// The same requests, right: a Referer from the console's own page does as well as an Origin,
	// and the token field does as well as the session.
	r = tc.do(http.MethodPost, "/outbox/retry", with(retry, "all", ""), cookie(session, map[string]string{"Referer": tc.url + "/"}))
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "is not a message id") {
		t.Errorf("retry without an id: status %d\n%s", r.status, r.body)
	}
	r = tc.do(http.MethodPost, "/outbox/retry", url.Values{"csrf": {csrf}, "id": {strconv.FormatInt(parked[0], 10)}}, cookie(session, map[string]string{"Referer": tc.url + "/"}))
	if r.status != http.StatusOK || !strings.Contains(r.body, "Re-queued 1 parked message") {
		t.Errorf("retry one: status %d\n%s", r.status, r.body)
	}
	r = tc.post("/outbox/retry", with(retry, "token", testToken), nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "Re-queued 2 parked messages") {
		t.Errorf("retry all with the token field: status %d\n%s", r.status, r.body)
	}
	if n := parkedOf(t, pool, schema, parked); n != 0 {
		t.Errorf("parked after the retries: %d; want 0", n)
	}
	if r := tc.get("/"); !strings.Contains(r.body, `id="outbox-parked">0<`) || !strings.Contains(r.body, `id="outbox-backlog">5<`) {
		t.Errorf("overview after the retries:\n%s", r.body)
	}
	// Signing out clears the cookie.
	r = tc.post("/logout", url.Values{"csrf": {csrf}}, session)
	if r.status != http.StatusSeeOther || !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign out: status %d, Set-Cookie %q", r.status, r.header.Get("Set-Cookie"))
	}
	if log := tc.stderr.String(); !strings.Contains(log, "refused POST /redrive") || !strings.Contains(log, "outbox retry") {
		t.Errorf("the console's log lacks the refusals or the retries:\n%s", log)
	}
}

// TestConsoleRedriveMovesOnlyNeverApplied (the SQS server and PostgreSQL): on the DLQ page the
// peek shows the messages and deletes none; with the token, the preview classifies against the
// handler's inbox rows (one of them made in the test by the inbox's claim) and changes nothing;
// the redrive then moves exactly the messages the handler never applied back to the queue,
// deletes the applied one and leaves the keyless one in the DLQ.
func TestConsoleRedriveMovesOnlyNeverApplied(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_conrd")
	schema := dbArgs[len(dbArgs)-1]
	processEvent(t, pool, schema, "warehouse", "evt_rd_done")
	processEvent(t, pool, schema, "loyalty", "evt_rd_other") // another handler's row: warehouse never applied it
	q := dlqWithEvents(t, "cli-conrd", `{"id":"evt_rd_done"}`, `{"id":"evt_rd_new"}`, `{"id":"evt_rd_other"}`, `{"no_id":1}`)
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	session := tc.login()
	csrf := tc.csrf()

	r := tc.peek(q.Name, session)
	for _, want := range []string{`id="peek"`, "evt_rd_done", "evt_rd_new", "evt_rd_other", "no valid key", `{&#34;no_id&#34;:1}`} {
		if r.status != http.StatusOK || !strings.Contains(r.body, want) {
			t.Fatalf("DLQ page lacks %q (status %d):\n%s", want, r.status, r.body)
		}
	}
	if strings.Contains(r.body, `id="redrive" disabled`) {
		t.Errorf("signed in, the redrive button is disabled")
	}
	if r := tc.get("/dlq?queue=no-such-queue"); r.status != http.StatusNotFound {
		t.Errorf("DLQ page of a queue not given: status %d; want 404", r.status)
	}

	form := url.Values{"csrf": {csrf}, "queue": {q.Name}, "handler": {"warehouse"}, "mode": {"dry-run"}}
	r = tc.post("/redrive", form, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>2</b>never applied: would be moved to "+q.Name) ||
		!strings.Contains(r.body, "<b>1</b>already applied: would be deleted") || !strings.Contains(r.body, "dry run: nothing changed") {
		t.Fatalf("preview: status %d\n%s", r.status, r.body)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 4, 30*time.Second)
	if n := queueCount(t, q.URL); n != 0 {
		t.Fatalf("the queue holds %d after a preview; want 0", n)
	}

	form.Set("mode", "run")
	form.Set("handler", "no such handler\x00")
	if r := tc.post("/redrive", form, session); r.status != http.StatusBadRequest || !strings.Contains(r.body, "handler name") {
		t.Errorf("redrive with a bad handler name: status %d\n%s", r.status, r.body)
	}
	form.Set("handler", "warehouse")
	r = tc.post("/redrive", form, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>2</b>never applied: moved to "+q.Name) ||
		!strings.Contains(r.body, "moved 2 messages from "+lastPart(q.DLQURL)) {
		t.Fatalf("redrive: status %d\n%s", r.status, r.body)
	}
	if got := keysIn(t, q.URL, 2); !slices.Equal(got, []string{"evt_rd_new", "evt_rd_other"}) {
		t.Errorf("moved back %v; want exactly the never-applied evt_rd_new and evt_rd_other", got)
	}
	if n := queueCount(t, q.URL); n != 2 {
		t.Errorf("the queue holds %d; want the 2 moved", n)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // the keyless one
	if log := tc.stderr.String(); !strings.Contains(log, "redrive of "+lastPart(q.DLQURL)+" to "+q.Name+" against handler warehouse") {
		t.Errorf("the redrive is not in the console's log:\n%s", log)
	}
}

// TestConsoleBodiesEscapedOrHidden (the SQS server and PostgreSQL): a peeked body holding HTML
// is shown as text, escaped; with --no-bodies no body reaches the page, only the ids and keys.
func TestConsoleBodiesEscapedOrHidden(t *testing.T) {
	t.Parallel()
	_, dbArgs := migratedSchema(t, "cli_conbody")
	body := `{"id":"evt_xss","note":"<script>document.title='pwned'</script><img src=x onerror=alert(1)>"}`
	q := dlqWithEvents(t, "cli-conbody", body)

	tc := startConsole(t, append([]string{"--queue", q.Name}, dbArgs...)...)
	r := tc.peek(q.Name, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "evt_xss") {
		t.Fatalf("DLQ page: status %d\n%s", r.status, r.body)
	}
	if strings.Contains(r.body, "<script>document") || strings.Contains(r.body, "<img src=x") ||
		!strings.Contains(r.body, "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") {
		t.Fatalf("the body is not escaped:\n%s", r.body)
	}
	// The peek made it visible again: a second peek sees it at once.
	if r := tc.peek(q.Name, nil); !strings.Contains(r.body, "evt_xss") {
		t.Fatalf("a second peek does not see the message:\n%s", r.body)
	}

	hidden := startConsole(t, append([]string{"--queue", q.Name, "--no-bodies"}, dbArgs...)...)
	r = hidden.peek(q.Name, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "evt_xss") || !strings.Contains(r.body, "(hidden: --no-bodies)") ||
		strings.Contains(r.body, "pwned") || strings.Contains(r.body, "onerror") {
		t.Fatalf("--no-bodies: status %d\n%s", r.status, r.body)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // peeks delete nothing
}

// dlqReceives receives the n messages of the DLQ, as a worker would, and makes them visible
// again; it returns each message's ApproximateReceiveCount by event key (by message id for a
// keyless one). Receiving every one shows that none was left hidden.
func dlqReceives(t *testing.T, dlqURL string, n int) map[string]string {
	t.Helper()
	got := map[string]string{}
	var handles []*string
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			k := aws.ToString(m.MessageAttributes["event_id"].StringValue)
			if k == "" {
				k = aws.ToString(m.MessageId)
			}
			got[k] = m.Attributes["ApproximateReceiveCount"]
			handles = append(handles, m.ReceiptHandle)
		}
	}
	if len(got) != n {
		t.Fatalf("received %d messages of the DLQ, want %d: %v", len(got), n, got)
	}
	for _, h := range handles {
		if _, err := srv.Client().ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(dlqURL), ReceiptHandle: h, VisibilityTimeout: 0}); err != nil {
			t.Fatalf("make a received message visible again: %v", err)
		}
	}
	return got
}

// TestConsoleGETNeverReceives (the SQS server and PostgreSQL): opening the DLQ page with GET
// receives nothing, whoever links to it: a cross-site <img> (Sec-Fetch-Site cross-site), a
// request with no headers at all, or the console's own page signed in. The DLQ's messages stay
// visible with unchanged receive counts (ApproximateReceiveCount, where the server counts: fauxqs;
// GoAws says 1 always, so there the messages being receivable at once, and the page showing none,
// are what is checked). A peek POSTed cross-site, or from another site's form, is refused; one
// from the console's own page (signed in when the console has a token) peeks, and shows the two
// errors of a message without a key separated.
func TestConsoleGETNeverReceives(t *testing.T) {
	t.Parallel()
	_, dbArgs := migratedSchema(t, "cli_conget")
	q := dlqWithEvents(t, "cli-conget", `{"id":"evt_get_1"}`, `{"id":"evt_get_2"}`, `{"no_id":1}`)
	counts := srv.Lacks(sqstest.ReceiveCount) == ""
	acting := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	readOnly := startConsole(t, append([]string{"--queue", q.Name}, dbArgs...)...)
	session := acting.login()

	for _, c := range []struct {
		name    string
		tc      *testConsole
		headers map[string]string
	}{
		{"no headers", acting, nil},
		{"cross-site <img>", acting, map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image", "Sec-Fetch-Mode": "no-cors",
			"Referer": "http://attacker.example/", "Cookie": session.String()}},
		{"own page, signed in", acting, map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": acting.url + "/", "Origin": acting.url,
			"Cookie": session.String()}},
		{"read-only, no headers", readOnly, nil},
		{"read-only, cross-site <img>", readOnly, map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image", "Referer": "http://attacker.example/"}},
		{"read-only, own page", readOnly, map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": readOnly.url + "/"}},
	} {
		r := c.tc.do(http.MethodGet, "/dlq?queue="+url.QueryEscape(q.Name), nil, c.headers)
		if r.status != http.StatusOK || !strings.Contains(r.body, `id="peek-none"`) || !strings.Contains(r.body, "Peek (receives the messages, raising their receive counts)") ||
			strings.Contains(r.body, `id="peek"`) || strings.Contains(r.body, "evt_get_") {
			t.Errorf("GET /dlq, %s: status %d; want 200, the peek button and no message\n%s", c.name, r.status, r.body)
		}
	}
	// Peeks that do not come from the console's own page, or come unsigned, are refused.
	form := url.Values{"csrf": {acting.csrf()}, "queue": {q.Name}}
	for _, c := range []struct {
		name    string
		tc      *testConsole
		form    url.Values
		headers map[string]string
		want    string
	}{
		{"cross-site form", acting, form, map[string]string{"Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site", "Cookie": session.String()}, "did not come from this console"},
		{"Sec-Fetch-Site cross-site", acting, form, map[string]string{"Origin": acting.url, "Sec-Fetch-Site": "cross-site", "Cookie": session.String()}, "did not come from this console"},
		{"no headers", acting, form, map[string]string{"Cookie": session.String()}, "did not come from this console"},
		{"no CSRF", acting, url.Values{"queue": {q.Name}}, map[string]string{"Origin": acting.url, "Cookie": session.String()}, "CSRF"},
		{"not signed in", acting, form, map[string]string{"Origin": acting.url, "Sec-Fetch-Site": "same-origin"}, "not signed in"},
		{"read-only, cross-site form", readOnly, url.Values{"csrf": {readOnly.csrf("/dlq?queue=" + url.QueryEscape(q.Name))}, "queue": {q.Name}}, map[string]string{"Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site"}, "did not come from this console"},
		{"read-only, no CSRF", readOnly, url.Values{"queue": {q.Name}}, map[string]string{"Origin": readOnly.url}, "CSRF"},
	} {
		r := c.tc.do(http.MethodPost, "/dlq", c.form, c.headers)
		if r.status != http.StatusForbidden || !strings.Contains(r.body, c.want) || strings.Contains(r.body, "evt_get_") {
			t.Errorf("POST /dlq, %s: status %d; want 403 with %q and no message\n%.3000s", c.name, r.status, c.want, r.body)
		}
	}
	// Nothing was received: every message is receivable at once, each for the first time.
	got := dlqReceives(t, q.DLQURL, 3)
	if counts {
		for k, n := range got {
			if n != "1" {
				t.Errorf("message %s: ApproximateReceiveCount %s after the GETs and refused peeks; want 1 (the test's own receive)", k, n)
			}
		}
	}

	// The peek from the console's own page, signed in, receives and shows them; so does a
	// read-only console's.
	for _, c := range []struct {
		name    string
		tc      *testConsole
		session *http.Cookie
		seen    string // the receive count the page shows (fauxqs): the test's receive, the peeks before
	}{
		{"signed in", acting, session, "2"},
		{"read-only", readOnly, nil, "3"},
	} {
		r := c.tc.peek(q.Name, c.session)
		if r.status != http.StatusOK || !strings.Contains(r.body, `id="peek"`) || !strings.Contains(r.body, "evt_get_1") || !strings.Contains(r.body, "evt_get_2") {
			t.Fatalf("peek, %s: status %d; want the messages\n%s", c.name, r.status, r.body)
		}
		if counts && strings.Count(r.body, `<td class="num">`+c.seen+`</td>`) != 3 {
			t.Errorf("peek, %s: want each message at receive %s\n%s", c.name, c.seen, r.body)
		}
		// The keyless message's two reasons, each source tried, are separated.
		if !regexp.MustCompile(`no valid key: [^<]*missing; [^<]*missing`).MatchString(r.body) {
			t.Errorf("peek, %s: the keyless message's errors are not separated by \"; \"\n%s", c.name, r.body)
		}
	}
	if counts {
		for k, n := range dlqReceives(t, q.DLQURL, 3) {
			if n != "4" {
				t.Errorf("message %s: ApproximateReceiveCount %s after two peeks; want 4", k, n)
			}
		}
	}
}

// TestConsoleSignOutEndsTheSession (PostgreSQL): signing out makes the session cookie worthless,
// for whoever holds a copy: the same cookie afterwards is signed out on the pages and refused on
// an action. Signing in again gives a new cookie.
func TestConsoleSignOutEndsTheSession(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_conout")
	schema := dbArgs[len(dbArgs)-1]
	parked := seedOutbox(t, pool, schema)
	tc := startConsole(t, append([]string{"--token", testToken}, dbArgs...)...)
	session := tc.login()
	if session.MaxAge <= 0 || session.MaxAge > int(sessionTTL/time.Second) {
		t.Errorf("session cookie Max-Age %d; want 1 to %d", session.MaxAge, int(sessionTTL/time.Second))
	}
	signedIn := func(ck *http.Cookie) bool {
		t.Helper()
		return strings.Contains(tc.do(http.MethodGet, "/", nil, map[string]string{"Cookie": ck.String()}).body, `id="mode">actions enabled`)
	}
	if !signedIn(session) {
		t.Fatal("signed in, the overview does not say actions enabled")
	}
	csrf := tc.csrf()
	r := tc.post("/logout", url.Values{"csrf": {csrf}}, session)
	if r.status != http.StatusSeeOther || !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign out: status %d, Set-Cookie %q", r.status, r.header.Get("Set-Cookie"))
	}
	// The browser dropped the cookie; a copy of it is refused.
	if signedIn(session) {
		t.Errorf("after sign-out the old cookie still signs in on the overview")
	}
	r = tc.post("/outbox/retry", url.Values{"csrf": {csrf}, "id": {strconv.FormatInt(parked[0], 10)}}, session)
	if r.status != http.StatusForbidden || !strings.Contains(r.body, "not signed in") {
		t.Errorf("retry with the cookie of a signed-out session: status %d; want 403 not signed in\n%s", r.status, r.body)
	}
	if n := parkedOf(t, pool, schema, parked); n != 3 {
		t.Errorf("parked after a refused retry: %d; want 3", n)
	}
	again := tc.login()
	if again.Value == session.Value || !signedIn(again) || signedIn(session) {
		t.Errorf("signing in again: want a new cookie that signs in, the old one still refused")
	}
	if !strings.Contains(tc.stderr.String(), "signed out: ") {
		t.Errorf("the sign-out is not in the console's log:\n%s", tc.stderr)
	}
}

// TestConsoleSessions (no server): a session is good until it ends or expires; past the bound a
// new sign-in ends the one that would expire first.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := newSessionStore(time.Hour, 3, func() time.Time { return now })
	a := s.start()
	now = now.Add(10 * time.Minute)
	b, c := s.start(), s.start()
	if !s.valid(a) || !s.valid(b) || !s.valid(c) || s.valid("") || s.valid(a+"x") {
		t.Fatal("fresh sessions: want a, b, c valid, nothing else")
	}
	d := s.start() // the fourth: a, which expires first, ends
	if s.valid(a) || !s.valid(b) || !s.valid(c) || !s.valid(d) {
		t.Errorf("past the bound: want a ended, b, c, d valid")
	}
	s.end(c)
	if s.valid(c) || !s.valid(b) {
		t.Errorf("after end(c): want c ended, b valid")
	}
	now = now.Add(time.Hour)
	if s.valid(b) || s.valid(d) {
		t.Errorf("an hour later: want b and d expired")
	}
	if n := len(s.expires); n != 0 {
		t.Errorf("%d sessions kept after all ended or expired; want 0", n)
	}
}

// TestConsoleFlags (no server): bad flags are usage errors, named; a short token is refused
// without being printed; the default address is loopback.
func TestConsoleFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--peek", "0"}, "--peek 0: want 1 to 10"},
		{[]string{"--token", "short-tok"}, "the token (--token or SQSINBOX_CONSOLE_TOKEN) has 9 characters; want at least 16"},
		{[]string{"--listen", "8080"}, `--listen "8080": want HOST:PORT`},
		{[]string{"--allow-host", "http://x/"}, `--allow-host "http://x/"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--schema", `x"y`}, "not a valid identifier"},
	} {
		r := cli(t, "", append([]string{"console"}, c.args...)...)
		line := r.mustFail(t, 2, c.want)
		if strings.Contains(line, "short-tok") {
			t.Errorf("the refusal prints the token: %s", line)
		}
	}
	r := cliWith(t, nil, map[string]string{consoleTokenEnv: "tiny"}, "", "console")
	r.mustFail(t, 2, "has 4 characters")
	if r := cli(t, "", "console", "--help"); !strings.Contains(r.stderr, `(default "127.0.0.1:8080")`) {
		t.Errorf("console --help does not show the loopback default:\n%s", r.stderr)
	}
}

// TestAllowedHosts (no server): on every interface the console answers the loopback names at its
// port and the --allow-host names (without a port: also at the scheme's default); on a particular
// address, that address too, and at port 80 the names without a port.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	got := allowedHosts(mustTCPAddr(t, "0.0.0.0:8080"), []string{"Console.Example", "proxy.example:9000"})
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"127.0.0.1:8080", "[::1]:8080", "console.example", "console.example:8080", "localhost:8080", "proxy.example:9000"}
	if !slices.Equal(keys, want) {
		t.Errorf("allowed hosts %q; want %q", keys, want)
	}
	if got := allowedHosts(mustTCPAddr(t, "10.1.2.3:80"), nil); !got["10.1.2.3"] || !got["10.1.2.3:80"] || !got["localhost"] {
		t.Errorf("port 80: %v", got)
	}
}

func mustTCPAddr(t *testing.T, s string) *net.TCPAddr {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// consoleUI holds the console's templates and its stylesheet: the binary serves them itself,
// with no build step and no script.
//
//go:embed consoleui
var consoleUI embed.FS

const (
	// consoleTokenEnv is where the token is best given: --token shows in the process list.
	consoleTokenEnv = "SQSINBOX_CONSOLE_TOKEN"
	// minTokenLen keeps a guessable token out: the login form is the only thing between a local
	// user, or a page that reaches the port, and a redrive.
	minTokenLen = 16
	// peekVisibility is how long a peek holds the messages it receives at most. A VisibilityTimeout
	// of 0 would be best, but the SDK leaves a zero out of the request and the queue's own (30 s
	// by default) would apply; so the peek holds them briefly and makes them visible at once.
	peekVisibility = 5
	// maxFormBytes bounds a POST body: the console's forms are a few short fields.
	maxFormBytes = 64 << 10
	// maxBodyShown is how much of a message body a peek shows, in characters.
	maxBodyShown = 8 << 10
	// parkedShown is how many parked outbox messages the overview lists.
	parkedShown = 20
	// sessionTTL is how long a sign-in lasts; the cookie's Max-Age tells the browser the same.
	sessionTTL = 12 * time.Hour
	// maxSessions bounds the sign-ins kept: past it, a new sign-in ends the one that would
	// expire first.
	maxSessions = 256
)

func runConsole(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "console", "console [--queue Q]... [flags]",
		"  SQSINBOX_CONSOLE_TOKEN=$(openssl rand -hex 16) sqsinbox console --queue warehouse --queue loyalty\n"+
			"  sqsinbox console --queue warehouse --no-bodies            # read-only: no token, no actions\n\n"+
			"Serves a web console on 127.0.0.1 (--listen): the queues' depths, in flight, delayed and\n"+
			"oldest ages, and their DLQs'; a DLQ's messages (a peek, on its button: received, raising their\n"+
			"receive counts, then made visible again, never deleted) and the classified redrive of\n"+
			"`sqsinbox redrive --handler H`, previewed or run; which handlers processed an event\n"+
			"(`sqsinbox events show`); the outbox's backlog and parked messages, with retry\n"+
			"(`sqsinbox outbox retry`). No page opened with GET receives or changes anything.\n\n"+
			"Without a token it is read-only: it can peek, and nothing else. With one (SQSINBOX_CONSOLE_TOKEN,\n"+
			"or --token), whoever signs in with it can peek, redrive and retry; every such request is a POST\n"+
			"from the console's own page (Origin or Referer, Sec-Fetch-Site, and a CSRF token), or it is\n"+
			"refused with 403 and changes nothing. Requests\n"+
			"naming another Host than 127.0.0.1, localhost, [::1] (at the port) or an --allow-host name are\n"+
			"refused with 421, against DNS rebinding. docs/console.md has the whole security model.")
	db.register(fs)
	var cf classifyFlags
	cf.register(fs)
	var queues, allowHosts stringList
	fs.Var(&queues, "queue", "a queue to show, by name or URL (repeatable); its dead-letter queue comes from its redrive policy")
	listen := fs.String("listen", "127.0.0.1:8080", "the address to listen on (port 0: any free port); the default answers this machine only")
	fs.Var(&allowHosts, "allow-host", "a further name the console answers to in the Host header (repeatable), such as the name a proxy "+
		"forwards, with or without a port; 127.0.0.1, localhost and [::1] at the listening port always are")
	token := fs.String("token", "", "enables the actions (redrive, outbox retry) for whoever gives it, at least "+strconv.Itoa(minTokenLen)+
		" characters (default $"+consoleTokenEnv+", which other users cannot read in the process list); without one the console is read-only")
	noBodies := fs.Bool("no-bodies", false, "never show message bodies, only their ids and event keys")
	noAge := fs.Bool("no-age", false, "do not ask CloudWatch for the age of the oldest messages")
	peek := fs.Int("peek", 10, "how many messages a DLQ peek receives (1 to 10)")
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if *peek < 1 || *peek > 10 {
		return fmt.Errorf("%w: --peek %d: want 1 to 10 (one receive)", errUsage, *peek)
	}
	if err := sqlident.Validate("--schema", db.schema); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	getenv := e.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	tok := *token
	if tok == "" {
		tok = getenv(consoleTokenEnv)
	}
	if tok != "" && len(tok) < minTokenLen {
		// The length only: the token itself is never printed.
		return fmt.Errorf("%w: the token (--token or %s) has %d characters; want at least %d (openssl rand -hex 16 makes one)",
			errUsage, consoleTokenEnv, len(tok), minTokenLen)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return fmt.Errorf("%w: --listen %q: want HOST:PORT, such as 127.0.0.1:8080", errUsage, *listen)
	}
	for _, h := range allowHosts {
		if h == "" || strings.ContainsAny(h, "/ @?#") {
			return fmt.Errorf("%w: --allow-host %q: want a host name, with or without :PORT", errUsage, h)
		}
	}

	c := &console{e: e, db: &db, withAge: !*noAge, noBodies: *noBodies, peekMax: *peek, token: tok, base: ctx}
	if c.retention, err = cf.inboxRetention(); err != nil {
		return err
	}
	if c.payloads, err = cf.payloadReader(ctx, getenv, fs.timeout); err != nil {
		return err
	}
	ib, closeDB, err := db.openInbox(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	if _, err := ib.Lookup(ctx, "sqsinbox-console-probe"); err != nil { // an unmigrated schema, named at once
		return db.inboxError(err)
	}
	c.ib, c.pool = ib, ib.Pool()
	if len(queues) > 0 {
		cfg, err := awsConfig(ctx, fs.timeout)
		if err != nil {
			return err
		}
		c.awsCfg, c.sqs = cfg, newSQS(cfg, fs.timeout)
		seen := map[string]bool{}
		for _, q := range queues {
			u, err := queueURL(ctx, c.sqs, q)
			if err != nil {
				return err
			}
			name := lastPart(u)
			if seen[name] {
				return fmt.Errorf("%w: --queue %s is given twice", errUsage, name)
			}
			seen[name] = true
			c.queues = append(c.queues, consoleQueue{name: name, url: u})
		}
	}
	if err := c.init(); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	c.hosts, c.port = allowedHosts(addr, allowHosts), strconv.Itoa(addr.Port)
	c.cookie = "sqsinbox_console_" + strconv.Itoa(addr.Port) // consoles on two ports keep their own
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second, // the forms are a few short fields
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	shown := addr.String()
	switch {
	case addr.IP.IsUnspecified():
		shown = net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
		fmt.Fprintf(e.stderr, "sqsinbox console: listening on every interface (%s), reachable from other machines; it answers "+
			"only the Host names 127.0.0.1, localhost and [::1] at port %d, and those of --allow-host\n", *listen, addr.Port)
	case !addr.IP.IsLoopback():
		fmt.Fprintf(e.stderr, "sqsinbox console: listening on %s, reachable from other machines\n", addr)
	}
	mode := "read-only: set " + consoleTokenEnv + " to enable redrive and retry"
	if tok != "" {
		mode = "actions enabled for whoever signs in with the token"
	}
	fmt.Fprintf(e.stdout, "sqsinbox console on http://%s/ (%s)\n", shown, mode)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", addr, err)
	case <-ctx.Done():
	}
	// An action in progress ends with its batch in hand (its context is ctx); pages end at once.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stop the console: %w", err)
	}
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// allowedHosts is the set of Host headers the console answers: the loopback names at the port,
// the address it listens on when that is a particular one, and the names given. Anything else is
// a request for another site that DNS pointed here (rebinding), refused.
func allowedHosts(addr *net.TCPAddr, extra []string) map[string]bool {
	port := strconv.Itoa(addr.Port)
	hosts := map[string]bool{}
	add := func(h string) {
		hosts[strings.ToLower(net.JoinHostPort(h, port))] = true
		if port == "80" || port == "443" { // a browser leaves the scheme's default port out
			hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
			if strings.Contains(h, ":") {
				hosts["["+strings.ToLower(h)+"]"] = true
			}
		}
	}
	for _, h := range []string{"127.0.0.1", "localhost", "::1"} {
		add(h)
	}
	if !addr.IP.IsUnspecified() {
		add(addr.IP.String())
	}
	for _, h := range extra {
		h = strings.ToLower(h)
		if _, _, err := net.SplitHostPort(h); err == nil {
			hosts[h] = true // given with its port: that one only
			continue
		}
		hosts[h] = true // behind a proxy on the scheme's default port
		hosts[net.JoinHostPort(strings.Trim(h, "[]"), port)] = true
	}
	return hosts
}

type consoleQueue struct {
	name string // the last part of the URL: what the pages show and name it by
	url  string
}

// console serves the pages. Its state is set before it serves and only read after, except busy
// and the log.
type console struct {
	e        env
	db       *dbFlags
	pool     *pgxpool.Pool
	ib       *inbox.Inbox
	awsCfg   aws.Config
	sqs      *sqs.Client
	queues   []consoleQueue
	withAge  bool
	noBodies bool
	peekMax  int
	// payloads and retention are the redrive classifier's (--payload-buckets, --inbox-retention).
	payloads  worker.PayloadFetcher
	retention time.Duration
	// handlers caches the handler names the inbox has rows of, for the redrive form.
	handlers handlerCache
	// base is the command's context: actions run under it, not the request's, so that closing
	// the tab does not cut a redrive short; an interrupt still ends it after the batch in hand.
	base context.Context

	token    string          // "" means read-only
	sessions *sessionStore   // the sign-ins: the session cookies that prove the token was given
	csrf     string          // in every form; random per process
	cookie   string          // the session cookie's name
	hosts    map[string]bool // the Host headers answered
	port     string          // the port it listens on, for the 421 page

	tmpl *template.Template
	css  []byte
	mux  *http.ServeMux
	// busy is held for writing by an action (one at a time) and for reading by a peek, so that a
	// peek never releases, or hides, the messages a redrive is working through.
	busy  sync.RWMutex
	logMu sync.Mutex
}

func (c *console) init() error {
	c.csrf = randomToken()
	c.sessions = newSessionStore(sessionTTL, maxSessions, time.Now)
	t, err := template.New("console").Funcs(template.FuncMap{
		"when": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}).ParseFS(consoleUI, "consoleui/*.html")
	if err != nil {
		return fmt.Errorf("console templates: %w", err)
	}
	c.tmpl = t
	if c.css, err = consoleUI.ReadFile("consoleui/console.css"); err != nil {
		return fmt.Errorf("console stylesheet: %w", err)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.index)
	m.HandleFunc("GET /dlq", c.dlqPage)
	m.HandleFunc("POST /dlq", c.dlqPeek)
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.HandleFunc("POST /redrive", c.redrive)
	m.HandleFunc("POST /outbox/retry", c.retryParked)
	m.HandleFunc("GET /static/console.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(c.css)
	})
	c.mux = m
	return nil
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionStore is the console's sign-ins: a random id for each, the session cookie's value, kept
// in memory with its expiry, so that signing out ends a session at once and a restart ends them
// all. An id is kept by its SHA-256, so a lookup's timing says nothing about a stored id.
type sessionStore struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	expires map[[sha256.Size]byte]time.Time
}

func newSessionStore(ttl time.Duration, maxN int, now func() time.Time) *sessionStore {
	return &sessionStore{ttl: ttl, max: maxN, now: now, expires: map[[sha256.Size]byte]time.Time{}}
}

// start makes a session good for ttl and returns its id. It drops the expired ones first, and
// past max the one that would expire first.
func (s *sessionStore) start() string {
	id := randomToken()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.expires {
		if !now.Before(e) {
			delete(s.expires, k)
		}
	}
	for len(s.expires) >= s.max {
		var first [sha256.Size]byte
		var at time.Time
		for k, e := range s.expires {
			if at.IsZero() || e.Before(at) {
				first, at = k, e
			}
		}
		delete(s.expires, first)
	}
	s.expires[sha256.Sum256([]byte(id))] = now.Add(s.ttl)
	return id
}

// valid reports whether id is a session started here, not ended and not expired.
func (s *sessionStore) valid(id string) bool {
	if id == "" {
		return false
	}
	k := sha256.Sum256([]byte(id))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.expires[k]
	if ok && !now.Before(e) {
		delete(s.expires, k)
		return false
	}
	return ok
}

// end ends the session id, if there is one: its cookie is refused from then on.
func (s *sessionStore) end(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expires, k)
}

// equalSecret compares in constant time; hashing first hides the length too. An empty given
// value never matches.
func equalSecret(given, want string) bool {
	if given == "" || want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// ServeHTTP sets the security headers on every answer, refuses unknown Host names, and bounds
// request bodies, before any page or action runs.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !c.hosts[strings.ToLower(r.Host)] {
		c.logf("refused %s %s from %s: Host %q is not one it answers to", r.Method, r.URL.Path, r.RemoteAddr, r.Host)
		http.Error(w, fmt.Sprintf("421 Misdirected Request: this console does not answer to the Host %q; "+
			"open it as http://127.0.0.1:%s/ or http://localhost:%s/ (the Host names it answers to: %s), "+
			"or start it with --allow-host NAME", r.Host, c.port, c.port, strings.Join(slices.Sorted(maps.Keys(c.hosts)), ", ")),
			http.StatusMisdirectedRequest)
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	c.mux.ServeHTTP(w, r)
}

// logf writes one line to stderr: actions done and requests refused, never a token.
func (c *console) logf(format string, args ...any) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	fmt.Fprintf(c.e.stderr, "sqsinbox console: "+format+"\n", args...)
}

// pageData is what every template gets; each page fills its own part.
type pageData struct {
	Title    string
	CSRF     string
	ReadOnly bool // started without a token
	SignedIn bool
	CanAct   bool
	CanPeek  bool // a read-only console peeks too; one with a token, once signed in
	NoBodies bool
	PeekMax  int
	Error    string

	Queues  []queueRow
	AgeNote string
	Key     string
	Lookup  *lookupView
	Outbox  *outboxView
	DLQ     *dlqView
	Result  *resultView
	Back    string
}

func (c *console) page(r *http.Request, title string) *pageData {
	in := c.signedIn(r)
	return &pageData{Title: title, CSRF: c.csrf, ReadOnly: c.token == "", SignedIn: in, CanAct: in, CanPeek: in || c.token == "",
		NoBodies: c.noBodies, PeekMax: c.peekMax, Back: "/"}
}

// render executes the whole page before writing any of it, so that a template error is a 500
// rather than half a page.
func (c *console) render(w http.ResponseWriter, status int, name string, d *pageData) {
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, name, d); err != nil {
		c.logf("render %s: %v", name, err)
		http.Error(w, "500: the page could not be rendered (the console's log says why)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, title, why string) {
	d := c.page(r, title)
	d.Error = why
	if ref := r.Header.Get("Referer"); ref != "" {
		if u, err := url.Parse(ref); err == nil && strings.EqualFold(u.Host, r.Host) {
			d.Back = u.RequestURI()
		}
	}
	c.render(w, status, "result.html", d)
}

// signedIn reports whether the request carries the cookie of a session that login started and
// that has neither ended nor expired.
func (c *console) signedIn(r *http.Request) bool {
	if c.token == "" {
		return false
	}
	ck, err := r.Cookie(c.cookie)
	return err == nil && c.sessions.valid(ck.Value)
}

// sameOrigin reports whether a POST came from a page of this console: its Origin (or, when a
// browser sends none, its Referer) names the Host the request was sent to, which ServeHTTP has
// checked. A request with neither is refused: every browser in use sends one of them on a form
// POST, and a script without them is not one of the console's pages. A browser that sends
// Sec-Fetch-Site says itself where the request came from: anything but same-origin is refused,
// whatever the other headers say.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && !strings.EqualFold(s, "same-origin") {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		return strings.EqualFold(o, "http://"+r.Host) || strings.EqualFold(o, "https://"+r.Host)
	}
	ref := r.Header.Get("Referer")
	if ref == "" {
		return false
	}
	u, err := url.Parse(ref)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

// allowPOST runs the checks of every state-changing request, in order: actions are on (a token
// was set), the request comes from the console's own page (Origin or Referer, Sec-Fetch-Site,
// and the CSRF token of its form), and, when session is set, the sender gave the token (the
// session cookie, or the token field itself). On a refusal it answers 403, logs why, and returns
// false; nothing has been changed.
func (c *console) allowPOST(w http.ResponseWriter, r *http.Request, session bool) bool {
	if c.token == "" {
		return c.allow(w, r, "this console is read-only: it was started without a token (--token or "+consoleTokenEnv+")")
	}
	return c.allow(w, r, c.postRefusal(r, session))
}

// allowPeek is allowPOST for a peek, which a read-only console does too: the request comes from
// the console's own page with its CSRF token, and, when the console has a token, from a
// signed-in sender.
func (c *console) allowPeek(w http.ResponseWriter, r *http.Request) bool {
	return c.allow(w, r, c.postRefusal(r, c.token != ""))
}

// postRefusal is why a POST is refused ("" when it is not): not from the console's own page, no
// CSRF token, or, when session is set, no token given.
func (c *console) postRefusal(r *http.Request, session bool) string {
	switch {
	case !sameOrigin(r):
		return "refused: the request did not come from this console's own page (its Origin, Referer or Sec-Fetch-Site names another site, or none was sent)"
	case !equalSecret(r.PostFormValue("csrf"), c.csrf):
		return "refused: the form's CSRF token is missing or out of date; reload the page (a restarted console has a new one) and try again"
	case session && !c.signedIn(r) && !equalSecret(r.PostFormValue("token"), c.token):
		return "refused: not signed in; sign in with the console's token first"
	}
	return ""
}

// allow lets the request on when why is ""; otherwise it answers 403 with why, logs it, and
// returns false.
func (c *console) allow(w http.ResponseWriter, r *http.Request, why string) bool {
	if why == "" {
		return true
	}
	c.logf("refused POST %s from %s: %s", r.URL.Path, r.RemoteAddr, why)
	c.fail(w, r, http.StatusForbidden, "Refused", why)
	return false
}

func (c *console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "login.html", c.page(r, "Sign in"))
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, false) {
		return
	}
	if !equalSecret(r.PostFormValue("token"), c.token) {
		c.logf("refused sign-in from %s: wrong token", r.RemoteAddr)
		d := c.page(r, "Sign in")
		d.Error = "That is not the console's token."
		c.render(w, http.StatusForbidden, "login.html", d)
		return
	}
	if ck, err := r.Cookie(c.cookie); err == nil {
		c.sessions.end(ck.Value) // a browser signing in again keeps one session, the new one
	}
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: c.sessions.start(), Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	c.logf("signed in: %s", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, false) {
		return
	}
	if ck, err := r.Cookie(c.cookie); err == nil {
		c.sessions.end(ck.Value) // the cookie is worthless from now on, whoever holds a copy
	}
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	c.logf("signed out: %s", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// queueRow is one line of the queues table; counts are SQS's approximate ones, as text.
type queueRow struct {
	Name, Err                                        string
	Visible, InFlight, Delayed, Age                  string
	DLQName, DLQErr, DLQVisible, DLQInFlight, DLQAge string
	ageAt, dlqAgeAt                                  int // index into the CloudWatch names, -1: none
}

type lookupView struct {
	Key   string
	Found []inbox.ProcessedEvent
	Err   string
}

type outboxView struct {
	Missing string
	Err     string
	Backlog int64
	Oldest  string
	Parked  int64
	Rows    []parkedView
}

type parkedView struct {
	ID                                        int64
	EventID, Destination, ParkedAt, LastError string
	Attempts                                  int
}

func (c *console) index(w http.ResponseWriter, r *http.Request) {
	d := c.page(r, "Overview")
	status := http.StatusOK
	q, err := url.ParseQuery(r.URL.RawQuery)
	switch {
	case err != nil:
		d.Lookup = &lookupView{Err: "the address's query is not valid URL encoding: " + err.Error()}
		status = http.StatusBadRequest
	case q.Has("key"):
		key := q.Get("key")
		d.Key = key
		d.Lookup, status = c.lookup(r.Context(), key)
	}
	d.Queues, d.AgeNote = c.queueRows(r.Context())
	d.Outbox = c.outboxView(r.Context())
	c.render(w, status, "index.html", d)
}

// lookup is `sqsinbox events show KEY`: inbox.Lookup, which binds the key as a parameter, so a
// key of any content is only ever data.
func (c *console) lookup(ctx context.Context, key string) (*lookupView, int) {
	v := &lookupView{Key: key}
	if !utf8.ValidString(key) {
		v.Key = strconv.Quote(key)
	}
	if err := inbox.ValidateKey(key); err != nil {
		v.Err = "This key cannot be looked up: " + err.Error() + "."
		return v, http.StatusBadRequest
	}
	found, err := c.ib.Lookup(ctx, key)
	if err != nil {
		v.Err = "lookup: " + c.db.inboxError(err).Error()
		return v, http.StatusInternalServerError
	}
	v.Found = found
	return v, http.StatusOK
}

// queueRows reads each queue's attributes and its DLQ's, then the oldest ages of all of them
// from CloudWatch in one call, as `sqsinbox stats` does. A failing queue fails its row only.
func (c *console) queueRows(ctx context.Context) ([]queueRow, string) {
	rows := make([]queueRow, 0, len(c.queues))
	var names []string
	for _, q := range c.queues {
		row := queueRow{Name: q.name, ageAt: -1, dlqAgeAt: -1}
		a, err := attributes(ctx, c.sqs, q.url)
		if err != nil {
			row.Err = err.Error()
			rows = append(rows, row)
			continue
		}
		row.Visible, row.InFlight, row.Delayed = countAttr(a, "ApproximateNumberOfMessages"), countAttr(a, "ApproximateNumberOfMessagesNotVisible"), countAttr(a, "ApproximateNumberOfMessagesDelayed")
		row.ageAt, names = len(names), append(names, q.name)
		if arn := dlqARN(a["RedrivePolicy"]); arn != "" {
			du, err := urlFromARN(ctx, c.sqs, arn)
			var da map[string]string
			if err == nil {
				da, err = attributes(ctx, c.sqs, du)
			}
			if err != nil {
				row.DLQErr = "dead-letter queue: " + err.Error()
			} else {
				row.DLQName, row.DLQVisible, row.DLQInFlight = lastPart(du), countAttr(da, "ApproximateNumberOfMessages"), countAttr(da, "ApproximateNumberOfMessagesNotVisible")
				row.dlqAgeAt, names = len(names), append(names, row.DLQName)
			}
		}
		rows = append(rows, row)
	}
	note := ""
	var ages []queueAge
	switch {
	case !c.withAge:
		note = "not asked (--no-age)"
	case len(names) > 0:
		var err error
		if ages, err = oldestAges(ctx, c.awsCfg, names); err != nil {
			ages, note = nil, ageUnavailable(err)
		}
	}
	cell := func(i int) string {
		switch {
		case i < 0:
			return ""
		case ages == nil:
			return "unavailable"
		}
		return ages[i].text()
	}
	for i := range rows {
		rows[i].Age, rows[i].DLQAge = cell(rows[i].ageAt), cell(rows[i].dlqAgeAt)
	}
	return rows, note
}

// countAttr is a count attribute of a queue, or "–" where the server does not give it (GoAws has
// no ApproximateNumberOfMessagesDelayed).
func countAttr(a map[string]string, name string) string {
	if v, ok := a[name]; ok {
		return v
	}
	return "–"
}

// outboxView is `sqsinbox stats`'s outbox part: the backlog, its oldest age, and the parked
// messages, the last parked first.
func (c *console) outboxView(ctx context.Context) *outboxView {
	ob, err := openOutbox(ctx, c.pool, c.db.schema)
	if errors.Is(err, errOutboxNotMigrated) {
		return &outboxView{Missing: "The outbox is not migrated in schema " + c.db.schema +
			": nothing to show (a service that uses it runs `sqsinbox migrate up`)."}
	}
	if err != nil {
		return &outboxView{Err: "outbox: " + oneLine(err)}
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		return &outboxView{Err: oneLine(err)}
	}
	v := &outboxView{Backlog: st.Backlog, Parked: st.Parked, Oldest: "none"}
	if st.Backlog > 0 {
		v.Oldest = ageText(st.OldestUnsent)
	}
	if st.Parked == 0 {
		return v
	}
	rows, err := listParked(ctx, c.pool, c.db.schema, parkedShown)
	if err != nil {
		v.Err = oneLine(err)
		return v
	}
	for _, p := range rows {
		v.Rows = append(v.Rows, parkedView{ID: p.id, EventID: p.eventID, Destination: p.destination, Attempts: p.attempts,
			ParkedAt: p.parkedAt.UTC().Format(time.RFC3339), LastError: errorText(p.lastError)})
	}
	return v
}

// queue is the configured queue of that name; the pages reach no other.
func (c *console) queue(name string) (consoleQueue, bool) {
	for _, q := range c.queues {
		if q.name == name {
			return q, true
		}
	}
	return consoleQueue{}, false
}

// dlqOf is the URL and attributes of q's dead-letter queue, from q's redrive policy.
func (c *console) dlqOf(ctx context.Context, q consoleQueue) (string, map[string]string, error) {
	a, err := attributes(ctx, c.sqs, q.url)
	if err != nil {
		return "", nil, err
	}
	arn := dlqARN(a["RedrivePolicy"])
	if arn == "" {
		return "", nil, fmt.Errorf("queue %s has no redrive policy, so no dead-letter queue", q.name)
	}
	du, err := urlFromARN(ctx, c.sqs, arn)
	if err != nil {
		return "", nil, err
	}
	da, err := attributes(ctx, c.sqs, du)
	return du, da, err
}

type dlqView struct {
	Queue, DLQName, Visible, InFlight string
	Err, PeekErr                      string
	Handler                           string
	Peeked                            bool     // the page answers a peek (a POST); opened with GET, it received nothing
	Handlers                          []string // the inbox's handler names, for the redrive form
	Messages                          []peekMessage
}

type peekMessage struct {
	ID, Key, KeyErr, Receives, Sent, Body string
}

// dlqPage is the DLQ page opened with GET: the DLQ's name and counts, the peek button and the
// redrive form. It receives nothing: a GET can come from any page the operator opens (an <img>
// of another site), and a receive raises the messages' receive counts and hides them.
func (c *console) dlqPage(w http.ResponseWriter, r *http.Request) {
	c.dlq(w, r, r.URL.Query().Get("queue"), r.URL.Query().Get("handler"), false)
}

// dlqPeek is the peek button: the DLQ page with up to peekMax messages received, after the
// checks of a POST from the console's own page.
func (c *console) dlqPeek(w http.ResponseWriter, r *http.Request) {
	if !c.allowPeek(w, r) {
		return
	}
	c.dlq(w, r, r.PostFormValue("queue"), r.PostFormValue("handler"), true)
}

// dlq renders the DLQ page of the queue name; it receives from the DLQ only when peek is set.
func (c *console) dlq(w http.ResponseWriter, r *http.Request, name, handler string, peek bool) {
	q, ok := c.queue(name)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such queue", fmt.Sprintf("%q is not one of the queues this console was given (--queue).", name))
		return
	}
	d := c.page(r, "DLQ of "+q.name)
	v := &dlqView{Queue: q.name, Handler: handler, Peeked: peek, Handlers: c.knownHandlers(r.Context())}
	d.DLQ = v
	du, da, err := c.dlqOf(r.Context(), q)
	if err != nil {
		v.Err = err.Error()
		c.render(w, http.StatusOK, "dlq.html", d)
		return
	}
	v.DLQName, v.Visible, v.InFlight = lastPart(du), countAttr(da, "ApproximateNumberOfMessages"), countAttr(da, "ApproximateNumberOfMessagesNotVisible")
	if !peek {
		c.render(w, http.StatusOK, "dlq.html", d)
		return
	}
	if !c.busy.TryRLock() {
		v.PeekErr = "No peek: an action of this console is running. Peek again when it is done."
		c.render(w, http.StatusConflict, "dlq.html", d)
		return
	}
	v.Messages, err = c.peek(r.Context(), du)
	c.busy.RUnlock()
	if err != nil {
		v.PeekErr = err.Error()
	}
	c.render(w, http.StatusOK, "dlq.html", d)
}

// errorList is err's message with the errors it joins (errors.Join puts a newline between them)
// separated by "; ": on a page a newline is a space, and would run them together.
func errorList(err error) string {
	var parts []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// peek receives up to peekMax messages of the DLQ and makes them visible again at once; it never
// deletes. A release that fails leaves the message hidden for peekVisibility seconds only.
func (c *console) peek(ctx context.Context, dlqURL string) ([]peekMessage, error) {
	out, err := c.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(dlqURL),
		MaxNumberOfMessages:         int32(c.peekMax),
		WaitTimeSeconds:             1,
		VisibilityTimeout:           peekVisibility,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("peek at %s: %s", lastPart(dlqURL), apiError(err))
	}
	rctx := context.WithoutCancel(ctx)
	var msgs []peekMessage
	for _, m := range out.Messages {
		_, _ = c.sqs.ChangeMessageVisibility(rctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		pm := peekMessage{ID: aws.ToString(m.MessageId), Receives: m.Attributes["ApproximateReceiveCount"]}
		if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
			pm.Sent = time.UnixMilli(ms).UTC().Format(time.RFC3339)
		}
		if key, err := messageKey(m); err != nil {
			pm.KeyErr = "no valid key: " + errorList(err)
		} else {
			pm.Key = key
		}
		if !c.noBodies {
			pm.Body = aws.ToString(m.Body)
			if r := []rune(pm.Body); len(r) > maxBodyShown {
				pm.Body = string(r[:maxBodyShown]) + fmt.Sprintf("… (%d bytes in all)", len(aws.ToString(m.Body)))
			}
		}
		msgs = append(msgs, pm)
	}
	return msgs, nil
}

type resultView struct {
	Counts []resultCount
	Lines  []string
	Report string
}

type resultCount struct {
	N    int
	What string
}

// redrive is `sqsinbox redrive --from DLQ --to QUEUE --handler H [--dry-run] [--keep-applied]
// [--max N]`, or with `--route TYPE=H ... [--type-attribute A] [--type-field F]` in place of
// --handler, in copy mode, through the same classifier and copy loop.
func (c *console) redrive(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, true) {
		return
	}
	q, ok := c.queue(r.PostFormValue("queue"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such queue", fmt.Sprintf("%q is not one of the queues this console was given (--queue).", r.PostFormValue("queue")))
		return
	}
	cc, err := c.redriveConfig(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Redrive not started", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return
	}
	maxN := 0
	if s := strings.TrimSpace(r.PostFormValue("max")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			c.fail(w, r, http.StatusBadRequest, "Redrive not started", fmt.Sprintf("at most %q: want a whole number, 0 or more (empty or 0: every message)", s))
			return
		}
		maxN = n
	}
	if !c.busy.TryLock() {
		c.fail(w, r, http.StatusConflict, "Redrive not started", "another action or a peek of this console is running; try again when it is done")
		return
	}
	defer c.busy.Unlock()
	ctx := c.base
	du, _, err := c.dlqOf(ctx, q)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Redrive not started", err.Error())
		return
	}
	cl, err := c.db.newClassifier(ctx, c.ib, cc)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "Redrive not started", oneLine(err))
		return
	}
	var report bytes.Buffer
	err = copyMessages(ctx, env{stdout: &report, stderr: io.Discard}, c.sqs, du, q.url, maxN, 0, cl)
	kind := "redrive"
	if cc.dryRun {
		kind = "redrive preview (dry run)"
	}
	c.logf("%s of %s to %s against %s, from %s: %s%s", kind, lastPart(du), q.name, cl.describe(), r.RemoteAddr, cl.progress(),
		map[bool]string{true: "; failed: " + errText(err), false: ""}[err != nil])

	verb, applied := "moved to "+q.name, "deleted from the DLQ"
	if cc.keepApplied {
		applied = "left in the DLQ (keep applied)"
	}
	if cc.dryRun {
		verb, applied = "would be "+verb, "would be "+applied
	}
	d := c.page(r, "Redrive of "+lastPart(du)+" against "+cl.describe())
	if cc.dryRun {
		d.Title = "Preview: redrive of " + lastPart(du) + " against " + cl.describe() + " (nothing changed)"
	}
	d.Back = "/dlq?queue=" + url.QueryEscape(q.name) + "&handler=" + url.QueryEscape(cc.handler)
	d.Result = &resultView{Report: report.String(), Counts: []resultCount{
		{cl.counts[classMove], "never applied: " + verb},
		{cl.counts[classApplied], "already applied: " + applied},
		{cl.counts[classLeave], "left in the DLQ (the report says why)"},
	}}
	status := http.StatusOK
	if err != nil {
		d.Error = "The redrive stopped: " + errText(err)
		status = http.StatusBadGateway
	}
	c.render(w, status, "result.html", d)
}

// redriveConfig reads the redrive form: one handler (chosen among the inbox's), or routes
// (TYPE=HANDLER, separated by spaces, commas or lines) with the type's attribute and body field,
// as the queue's Router has them.
func (c *console) redriveConfig(r *http.Request) (classifierConfig, error) {
	cc := classifierConfig{handler: strings.TrimSpace(r.PostFormValue("handler")), retention: c.retention, payloads: c.payloads,
		dryRun: r.PostFormValue("mode") != "run", keepApplied: r.PostFormValue("keep_applied") != "",
		allowOld: r.PostFormValue("allow_old") != "", key: defaultKeySpec,
		types: inboxhandler.RouterConfig{TypeAttribute: cmp.Or(strings.TrimSpace(r.PostFormValue("type_attribute")), "type"),
			TypeField: strings.TrimSpace(r.PostFormValue("type_field"))}}
	routes := strings.FieldsFunc(r.PostFormValue("routes"), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	switch {
	case cc.handler != "" && len(routes) > 0:
		return cc, errors.New("give a handler (a queue with one handler) or routes (a router's queue), not both")
	case cc.handler == "" && len(routes) == 0:
		return cc, errors.New("choose the queue's handler, or give routes TYPE=HANDLER for a router's queue")
	case cc.handler != "":
		if err := inbox.ValidateHandler(cc.handler); err != nil {
			return cc, fmt.Errorf("handler: %w", err)
		}
	}
	var err error
	cc.routes, err = parseRoutes(routes)
	return cc, err
}

// handlerCache holds the inbox's handler names for a minute: finding them reads the whole table.
type handlerCache struct {
	mu    sync.Mutex
	names []string
	at    time.Time
}

// knownHandlers returns the names of the handlers the inbox has rows of (inbox.Stats), read at
// most once a minute; none when they cannot be read (the form then takes routes only).
func (c *console) knownHandlers(ctx context.Context) []string {
	h := &c.handlers
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names != nil && time.Since(h.at) < time.Minute {
		return h.names
	}
	st, err := c.ib.Stats(ctx)
	if err != nil {
		c.logf("the redrive form's handlers: %s", oneLine(err))
		return nil
	}
	h.names = []string{}
	for _, hs := range st.Handlers {
		h.names = append(h.names, hs.Handler)
	}
	h.at = time.Now()
	return h.names
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err)
}

// retryParked is `sqsinbox outbox retry ID` (one id) or `--all`: outbox.RetryParked.
func (c *console) retryParked(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, true) {
		return
	}
	var ids []int64
	if r.PostFormValue("all") == "" {
		id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
		if err != nil || id < 1 {
			c.fail(w, r, http.StatusBadRequest, "Nothing re-queued", fmt.Sprintf("%q is not a message id (a positive number)", r.PostFormValue("id")))
			return
		}
		ids = []int64{id}
	}
	if !c.busy.TryLock() {
		c.fail(w, r, http.StatusConflict, "Nothing re-queued", "another action or a peek of this console is running; try again when it is done")
		return
	}
	defer c.busy.Unlock()
	ob, err := openOutbox(c.base, c.pool, c.db.schema)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Nothing re-queued", oneLine(err))
		return
	}
	n, err := ob.RetryParked(c.base, ids...)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "Nothing re-queued", oneLine(err))
		return
	}
	c.logf("outbox retry from %s: re-queued %s (ids %v; none: every parked one)", r.RemoteAddr, plural(int(n), "parked message"), ids)
	d := c.page(r, "Outbox: re-queued "+plural(int(n), "parked message"))
	d.Back = "/#outbox"
	line := "Re-queued " + plural(int(n), "parked message") + " with their attempts reset: the relay publishes them again at once."
	if len(ids) == 1 && n == 0 {
		line = fmt.Sprintf("Message %d was not re-queued: it is not parked in %s.outbox_messages (no such id, already sent, or not failing).", ids[0], c.db.schema)
	}
	d.Result = &resultView{Lines: []string{line}}
	c.render(w, http.StatusOK, "result.html", d)
}

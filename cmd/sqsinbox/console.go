package main

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/worker"
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
	fs, o := consoleFlags(e)
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	getenv := e.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	tok, err := o.check(words, getenv)
	if err != nil {
		return err
	}
	c := &console{e: e, db: &o.db, withAge: !o.noAge, noBodies: o.noBodies, peekMax: o.peek, token: tok, base: ctx}
	closeDB, err := c.openInbox(ctx, o, getenv, fs.timeout)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := c.openQueues(ctx, o.queues, fs.timeout); err != nil {
		return err
	}
	if err := c.init(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	return c.serve(ctx, ln, o)
}

// consoleOptions are the console's flags.
type consoleOptions struct {
	db                 dbFlags
	cf                 classifyFlags
	queues, allowHosts stringList
	listen, token      string
	noBodies, noAge    bool
	peek               int
}

// consoleFlags is the console's flag set, and the options its flags set.
func consoleFlags(e env) (*flags, *consoleOptions) {
	o := &consoleOptions{}
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
	o.db.register(fs)
	o.cf.register(fs)
	fs.Var(&o.queues, "queue", "a queue to show, by name or URL (repeatable); its dead-letter queue comes from its redrive policy")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "the address to listen on (port 0: any free port); the default answers this machine only")
	fs.Var(&o.allowHosts, "allow-host", "a further name the console answers to in the Host header (repeatable), such as the name a proxy "+
		"forwards, with or without a port; 127.0.0.1, localhost and [::1] at the listening port always are")
	fs.StringVar(&o.token, "token", "", "enables the actions (redrive, outbox retry) for whoever gives it, at least "+strconv.Itoa(minTokenLen)+
		" characters (default $"+consoleTokenEnv+", which other users cannot read in the process list); without one the console is read-only")
	fs.BoolVar(&o.noBodies, "no-bodies", false, "never show message bodies, only their ids and event keys")
	fs.BoolVar(&o.noAge, "no-age", false, "do not ask CloudWatch for the age of the oldest messages")
	fs.IntVar(&o.peek, "peek", 10, "how many messages a DLQ peek receives (1 to 10)")
	return fs, o
}

// check validates the words and flags, before anything is opened, and returns the token: --token,
// else $SQSINBOX_CONSOLE_TOKEN ("" for a read-only console).
func (o *consoleOptions) check(words []string, getenv func(string) string) (string, error) {
	if len(words) != 0 {
		return "", fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if o.peek < 1 || o.peek > 10 {
		return "", fmt.Errorf("%w: --peek %d: want 1 to 10 (one receive)", errUsage, o.peek)
	}
	if err := sqlident.Validate("--schema", o.db.schema); err != nil {
		return "", fmt.Errorf("%w: %w", errUsage, err)
	}
	tok := o.token
	if tok == "" {
		tok = getenv(consoleTokenEnv)
	}
	if tok != "" && len(tok) < minTokenLen {
		// The length only: the token itself is never printed.
		return "", fmt.Errorf("%w: the token (--token or %s) has %d characters; want at least %d (openssl rand -hex 16 makes one)",
			errUsage, consoleTokenEnv, len(tok), minTokenLen)
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return "", fmt.Errorf("%w: --listen %q: want HOST:PORT, such as 127.0.0.1:8080", errUsage, o.listen)
	}
	for _, h := range o.allowHosts {
		if h == "" || strings.ContainsAny(h, "/ @?#") {
			return "", fmt.Errorf("%w: --allow-host %q: want a host name, with or without :PORT", errUsage, h)
		}
	}
	return tok, nil
}

// openInbox sets the redrive classifier's options and opens the inbox, checking that its schema
// is migrated; closeDB closes it.
func (c *console) openInbox(ctx context.Context, o *consoleOptions, getenv func(string) string, timeout time.Duration) (closeDB func(), err error) {
	if c.retention, err = o.cf.inboxRetention(); err != nil {
		return nil, err
	}
	if c.payloads, err = o.cf.payloadReader(ctx, getenv, timeout); err != nil {
		return nil, err
	}
	ib, closeDB, err := o.db.openInbox(ctx, timeout)
	if err != nil {
		return nil, err
	}
	if _, err := ib.Lookup(ctx, "sqsinbox-console-probe"); err != nil { // an unmigrated schema, named at once
		closeDB()
		return nil, o.db.inboxError(err)
	}
	c.ib, c.pool = ib, ib.Pool()
	return closeDB, nil
}

// openQueues connects to SQS, when queues are given, and finds each queue's URL.
func (c *console) openQueues(ctx context.Context, queues []string, timeout time.Duration) error {
	if len(queues) == 0 {
		return nil
	}
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return err
	}
	c.awsCfg, c.sqs = cfg, newSQS(cfg, timeout)
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
	return nil
}

// serve serves the console on ln until ctx ends, then stops it: an action in progress ends with
// its batch in hand (its context is ctx); pages end at once.
func (c *console) serve(ctx context.Context, ln net.Listener, o *consoleOptions) error {
	addr := ln.Addr().(*net.TCPAddr)
	c.hosts, c.port = allowedHosts(addr, o.allowHosts), strconv.Itoa(addr.Port)
	c.cookie = "sqsinbox_console_" + strconv.Itoa(addr.Port) // consoles on two ports keep their own
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second, // the forms are a few short fields
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	c.announce(addr, o.listen)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stop the console: %w", err)
	}
	return nil
}

// announce prints the console's address and mode on stdout, and on stderr a warning when it is
// reachable from other machines.
func (c *console) announce(addr *net.TCPAddr, listen string) {
	shown := addr.String()
	switch {
	case addr.IP.IsUnspecified():
		shown = net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
		fmt.Fprintf(c.e.stderr, "sqsinbox console: listening on every interface (%s), reachable from other machines; it answers "+
			"only the Host names 127.0.0.1, localhost and [::1] at port %d, and those of --allow-host\n", listen, addr.Port)
	case !addr.IP.IsLoopback():
		fmt.Fprintf(c.e.stderr, "sqsinbox console: listening on %s, reachable from other machines\n", addr)
	}
	mode := "read-only: set " + consoleTokenEnv + " to enable redrive and retry"
	if c.token != "" {
		mode = "actions enabled for whoever signs in with the token"
	}
	fmt.Fprintf(c.e.stdout, "sqsinbox console on http://%s/ (%s)\n", shown, mode)
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
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
	m.HandleFunc("POST /dlq/discard", c.dlqDiscard)
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

type resultView struct {
	Counts []resultCount
	Lines  []string
	Report string
}

type resultCount struct {
	N    int
	What string
}

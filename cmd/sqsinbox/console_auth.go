package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

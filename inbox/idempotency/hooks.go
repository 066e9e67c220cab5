package idempotency

import (
	"context"
	"net/http"
	"time"
)

// Outcome says what the middleware did with a request that carried a key, or had to.
type Outcome string

// Outcomes of a request, for [Hooks].
const (
	// OutcomeFirst means the handler ran: a first attempt, or a retry of one that was rolled
	// back. Attempt.Stored says whether its response was stored and committed.
	OutcomeFirst Outcome = "first_attempt"
	// OutcomeReplay means the stored response was replayed; the handler did not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeConflict means another attempt with the key was in flight: 409.
	OutcomeConflict Outcome = "conflict"
	// OutcomeMismatch means the key was used before with another method, route or body: 422.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeMissingKey means a route that requires a key got none: 400.
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeRejected means the request was refused before its key was claimed: a malformed or
	// repeated key (400), no principal (401), or a body over the limit (413).
	OutcomeRejected Outcome = "rejected"
	// OutcomeError means the middleware could not claim the key or read what was stored (the
	// database failed), and the handler did not run: 503. Attempt.Err says why.
	OutcomeError Outcome = "error"
)

// Attempt describes one request to [Hooks]: every covered request (Config.Methods) that carries
// an Idempotency-Key, or lacks one where it is required. Requests that pass through untouched
// are not observed. Hooks must not keep it after Done returns.
type Attempt struct {
	// Request is the request as the middleware got it. Hooks must not read its body.
	Request *http.Request

	// Outcome is what the middleware did. Set before Done.
	Outcome Outcome
	// Status is the status sent to the client, or 0 when nothing was sent (the client had gone).
	// Set before Done.
	Status int
	// Stored is true when a first attempt's response was stored and committed with the handler's
	// writes. Set before Done.
	Stored bool
	// Duration is how long the middleware took, the handler included. Set before Done.
	Duration time.Duration
	// Err is the failure behind an OutcomeError, or behind a first attempt that was not stored
	// because the middleware failed (a panic, the store or the COMMIT), if any. Set before Done.
	Err error

	start   time.Time
	ran     bool // the handler was called
	missing bool // the request had no key
}

// Hooks observe the requests the middleware handles, for tracing and metrics (the idemotel
// package records them as OpenTelemetry spans). Either func may be nil. With Config.Hooks nil,
// the middleware pays one nil check per request.
type Hooks struct {
	// Start is called when the middleware takes a request on. It returns the context that the
	// rest of the request runs with, the handler's included (derived from ctx, for example
	// holding a span), which is then passed to Done.
	Start func(ctx context.Context, a *Attempt) context.Context
	// Done is called when the middleware is done with the request, with the context Start
	// returned and a's Outcome, Status, Stored, Duration and Err set.
	Done func(ctx context.Context, a *Attempt)
}

// observe begins the observation of r: the writer and request to go on with (the request's
// context is the one Start returned), and the func that ends it.
func (h *Hooks) observe(w http.ResponseWriter, r *http.Request, missing bool) (*observer, *http.Request) {
	o := &observer{ResponseWriter: w, hooks: h, a: Attempt{Request: r, start: time.Now(), missing: missing}}
	o.ctx = r.Context()
	if h.Start != nil {
		if ctx := h.Start(o.ctx, &o.a); ctx != o.ctx {
			o.ctx = ctx
			r = r.WithContext(ctx)
		}
	}
	return o, r
}

// observer is the response writer of an observed request: it notes the status sent and what the
// middleware did.
type observer struct {
	http.ResponseWriter
	hooks *Hooks
	ctx   context.Context
	a     Attempt
}

func (o *observer) WriteHeader(status int) {
	if o.a.Status == 0 {
		o.a.Status = status
	}
	o.ResponseWriter.WriteHeader(status)
}

func (o *observer) Write(b []byte) (int, error) {
	if o.a.Status == 0 {
		o.a.Status = http.StatusOK
	}
	return o.ResponseWriter.Write(b)
}

// Unwrap lets [http.ResponseController] reach the server's writer.
func (o *observer) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// end calls Done with the outcome, told from what the middleware noted and the status it sent.
func (o *observer) end() {
	a := &o.a
	a.Duration = time.Since(a.start)
	switch {
	case a.ran:
		a.Outcome = OutcomeFirst
	case o.Header().Get(HeaderReplayed) == "true":
		a.Outcome = OutcomeReplay
	case a.Status == http.StatusBadRequest && a.missing:
		a.Outcome = OutcomeMissingKey
	case a.Status == http.StatusConflict:
		a.Outcome = OutcomeConflict
	case a.Status == http.StatusUnprocessableEntity:
		a.Outcome = OutcomeMismatch
	case a.Status == http.StatusBadRequest, a.Status == http.StatusUnauthorized, a.Status == http.StatusRequestEntityTooLarge:
		a.Outcome = OutcomeRejected
	default:
		a.Outcome = OutcomeError
	}
	if o.hooks.Done != nil {
		o.hooks.Done(o.ctx, a)
	}
}

// note records, when w is an observed request's writer, that the handler ran (ran), that its
// response was stored (stored), or the middleware's failure (err, when not nil). On any other
// writer it does nothing.
func note(w http.ResponseWriter, ran, stored bool, err error) {
	o, ok := w.(*observer)
	if !ok {
		return
	}
	o.a.ran = o.a.ran || ran
	o.a.Stored = o.a.Stored || stored
	if err != nil && o.a.Err == nil {
		o.a.Err = err
	}
}

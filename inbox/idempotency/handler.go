package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

// ErrEmptyPrincipal is logged when Config.Principal returns "" without an error. The request gets
// 401, as for an error: an empty principal is never a client of its own.
var ErrEmptyPrincipal = errors.New("idempotency: Config.Principal returned an empty principal")

// ErrLeaseExpired is the cause of the handler's context when the attempt outlives Config.Lease.
var ErrLeaseExpired = errors.New("idempotency: the attempt outlived its lease")

// Handler returns next wrapped by the middleware. A covered request (Config.Methods) with a
// valid key runs next at most once per (client, key) within the TTL; a covered request without
// a key passes through unless Config.RequireKey says it must carry one.
func (m *Middleware) Handler(next http.Handler) http.Handler { return m.wrap(next, false) }

// RequireKey is [Middleware.Handler] for a route that requires a key: a covered request
// without one gets 400.
func (m *Middleware) RequireKey(next http.Handler) http.Handler { return m.wrap(next, true) }

func (m *Middleware) wrap(next http.Handler, require bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		values := r.Header.Values(HeaderKey)
		if len(values) == 0 && !require && (m.cfg.RequireKey == nil || !m.cfg.RequireKey(r)) {
			next.ServeHTTP(w, r)
			return
		}
		if m.cfg.Hooks != nil {
			o, or := m.cfg.Hooks.observe(w, r, len(values) == 0)
			defer o.end()
			w, r = o, or
		}
		if len(values) == 0 {
			writeProblem(w, http.StatusBadRequest, CodeKeyMissing,
				"This route requires an Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header).")
			return
		}
		key, err := ParseKey(values)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, CodeKeyInvalid, err.Error()+".")
			return
		}
		principal, err := m.cfg.Principal(r)
		if err == nil && principal == "" {
			// Every caller with an empty principal would share one key space: one client would
			// be replayed another's response.
			err = ErrEmptyPrincipal
		}
		if err != nil {
			m.cfg.Logger.InfoContext(r.Context(), "idempotency: no principal", "error", err)
			writeProblem(w, http.StatusUnauthorized, CodeUnauthenticated, "The client could not be identified.")
			return
		}
		body, ok := m.readBody(w, r)
		if !ok {
			return
		}
		m.serve(w, r, next, keyHash(principal, key), fingerprint(r.Method, m.cfg.Route(r), sha256.Sum256(body)), body)
	})
}

// readBody reads the whole body, up to the limit, for the fingerprint and for the handler.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		writeProblem(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			fmt.Sprintf("The request body exceeds %d bytes.", m.cfg.MaxBodyBytes))
		return nil, false
	}
	if r.ContentLength > m.cfg.MaxBodyBytes {
		return tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.MaxBodyBytes+1))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeKeyInvalid, "The request body could not be read.")
		return nil, false
	}
	if int64(len(body)) > m.cfg.MaxBodyBytes {
		return tooLarge()
	}
	return body, true
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, kh, fp, body []byte) {
	ctx := r.Context()
	log := m.cfg.Logger
	tx, row, err := m.beginClaim(ctx, kh, fp)
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	switch {
	case errors.Is(err, errInFlight):
		m.inFlight(w)
		return
	case err != nil:
		m.internal(w, r, "claim", err)
		return
	case !row.fresh:
		m.replayRow(w, r, row, fp)
		return
	}

	hctx, cancel := context.WithTimeoutCause(ctx, m.cfg.Lease, ErrLeaseExpired)
	defer cancel()
	rec := newRecorder(m.cfg.MaxResponseBytes)
	hr := r.WithContext(withTx(hctx, tx))
	hr.Body = io.NopCloser(bytes.NewReader(body))
	hr.ContentLength = int64(len(body))
	note(w, true, false, nil)
	var p *panics.Error
	if err := panics.Call(func() error { next.ServeHTTP(rec, hr); return nil }); errors.As(err, &p) {
		note(w, true, false, err)
		if errors.Is(err, http.ErrAbortHandler) {
			panic(p.Value) // the handler asked to abort the response; the deferred rollback runs
		}
		log.ErrorContext(ctx, "idempotency: handler panicked; its transaction rolled back",
			"panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
		writeProblem(w, http.StatusInternalServerError, CodeInternal, "The request failed; retry it with the same key.")
		return
	}
	rec.finish()
	switch {
	case rec.tooLarge:
		log.ErrorContext(ctx, "idempotency: response too large to store; the attempt rolled back",
			"limit", m.cfg.MaxResponseBytes, "method", r.Method, "path", r.URL.Path)
		writeProblem(w, http.StatusInternalServerError, CodeResponseTooLarge,
			"The response is too large to store for replay, so the request was not carried out.")
		return
	case hctx.Err() != nil && ctx.Err() == nil:
		writeProblem(w, http.StatusServiceUnavailable, CodeLeaseExpired,
			"The request took longer than its lease and was rolled back; retry it with the same key.")
		return
	case ctx.Err() != nil:
		return // the client is gone; the deferred rollback undoes the attempt
	case !m.cfg.Store(rec.status):
		writeResponse(w, rec.header, rec.status, rec.body.Bytes()) // rolled back by the defer
		return
	}
	if err := m.complete(hctx, tx, kh, rec.status, rec.header, rec.body.Bytes()); err != nil {
		m.internal(w, r, "store the response", err)
		return
	}
	done = true
	if err := tx.Commit(hctx); err != nil {
		if !pgtx.CommitUnknown(err) {
			m.internal(w, r, "commit", err)
			return
		}
		note(w, true, false, err)
		log.ErrorContext(ctx, "idempotency: commit outcome unknown", "error", err)
		writeProblem(w, http.StatusInternalServerError, CodeCommitUnknown,
			"Whether the request was carried out is unknown; retry it with the same key to find out.")
		return
	}
	note(w, true, true, nil)
	writeResponse(w, rec.header, rec.status, rec.body.Bytes())
}

func (m *Middleware) inFlight(w http.ResponseWriter) {
	w.Header().Set("Retry-After", m.retry)
	writeProblem(w, http.StatusConflict, CodeKeyInFlight,
		"A request with this Idempotency-Key is still being processed; retry later.")
}

func (m *Middleware) internal(w http.ResponseWriter, r *http.Request, step string, err error) {
	note(w, false, false, err)
	if r.Context().Err() != nil {
		return // the client is gone
	}
	m.cfg.Logger.ErrorContext(r.Context(), "idempotency: "+step+" failed", "error", err)
	writeProblem(w, http.StatusServiceUnavailable, CodeUnavailable, "The request could not be processed; retry it with the same key.")
}

func (m *Middleware) replayRow(w http.ResponseWriter, r *http.Request, row stored, fp []byte) {
	if !bytes.Equal(row.fingerprint, fp) {
		writeProblem(w, http.StatusUnprocessableEntity, CodeKeyReused,
			"This Idempotency-Key was used with a different request (method, route or body).")
		return
	}
	if row.status == nil { // never committed so; be safe
		m.inFlight(w)
		return
	}
	pairs, err := decodeHeaders(row.headers)
	if err != nil {
		m.internal(w, r, "decode stored headers", err)
		return
	}
	h := w.Header()
	for _, p := range pairs {
		h.Add(p[0], p[1])
	}
	h.Set(HeaderReplayed, "true")
	w.WriteHeader(int(*row.status))
	_, _ = w.Write(row.body)
}

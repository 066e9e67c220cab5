package idempotency

import (
	"bytes"
	"errors"
	"net/http"
)

// ErrResponseTooLarge is returned by the handler's ResponseWriter.Write when the response would
// exceed Config.MaxResponseBytes. The attempt then rolls back and the client gets 500.
var ErrResponseTooLarge = errors.New("idempotency: the response exceeds Config.MaxResponseBytes and cannot be stored")

// recorder buffers the handler's response until the transaction's outcome is known: nothing
// reaches the client before the commit.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int
	tooLarge bool
}

func newRecorder(max int) *recorder { return &recorder{header: http.Header{}, max: max} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status != 0 || code < 200 {
		return // 1xx are not stored; later calls are ignored, as net/http does
	}
	r.status = code
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.body.Len()+len(p) > r.max {
		r.tooLarge = true
		return 0, ErrResponseTooLarge
	}
	return r.body.Write(p)
}

// finish settles what net/http would: the default status and a sniffed Content-Type, so the
// stored response is the one the client got.
func (r *recorder) finish() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if _, ok := r.header["Content-Type"]; !ok && r.body.Len() > 0 && r.header.Get("Content-Encoding") == "" {
		r.header.Set("Content-Type", http.DetectContentType(r.body.Bytes()))
	}
}

func writeResponse(w http.ResponseWriter, h http.Header, status int, body []byte) {
	dst := w.Header()
	for k, v := range h {
		dst[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

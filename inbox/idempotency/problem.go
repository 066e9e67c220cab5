package idempotency

import (
	"encoding/json"
	"net/http"
)

// Problem codes, the "code" member of every problem+json response of the middleware, for
// clients that branch on them.
const (
	CodeKeyMissing       = "idempotency_key_missing"
	CodeKeyInvalid       = "idempotency_key_invalid"
	CodeKeyInFlight      = "idempotency_key_in_flight"
	CodeKeyReused        = "idempotency_key_reused"
	CodeBodyTooLarge     = "request_body_too_large"
	CodeUnauthenticated  = "unauthenticated"
	CodeResponseTooLarge = "response_too_large"
	CodeLeaseExpired     = "idempotency_lease_expired"
	CodeCommitUnknown    = "commit_outcome_unknown"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal_error"
)

// Problem is the RFC 9457 problem+json body of the middleware's own error responses.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	b, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Code: code})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

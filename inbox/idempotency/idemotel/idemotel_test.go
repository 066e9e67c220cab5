package idemotel_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency/idemotel"
)

// The tests run the real middleware on a real PostgreSQL and read the spans back from the
// OpenTelemetry SDK's in-memory exporter.
var db *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, "idemotel", &db) }

type fixture struct {
	exp     *tracetest.InMemoryExporter
	tracer  trace.Tracer
	handler http.Handler
	entered chan struct{} // the handler of a "hold" request has started
	release chan struct{} // lets it finish
}

// setup serves POST /payments (key required) and POST /notes (key optional) through the
// middleware with idemotel's hooks; the handler answers 201, or 500 for a body "fail", or waits
// for release for a body "hold".
func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := "t_" + strings.ToLower(rand.Text()[:12])
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) })
	mw, err := idempotency.New(pool, &idempotency.Config{Schema: schema, Hooks: idemotel.Hooks(tp),
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{exp: exp, tracer: tp.Tracer("app"), entered: make(chan struct{}, 1), release: make(chan struct{})}
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := f.tracer.Start(r.Context(), "insert payment")
		defer span.End()
		body := make([]byte, 16)
		n, _ := r.Body.Read(body)
		switch string(body[:n]) {
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
			return
		case "hold":
			f.entered <- struct{}{}
			<-f.release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.RequireKey(create))
	mux.Handle("/notes", mw.Handler(create))
	// The server span that otelhttp would make.
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := f.tracer.Start(r.Context(), "server", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
	return f
}

func (f *fixture) do(method, path, key, body string) int {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("X-Client", "acme")
	if key != "" {
		for k := range strings.SplitSeq(key, ",") {
			r.Header.Add(idempotency.HeaderKey, k)
		}
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w.Code
}

// TestOutcomes: each request that carries a key, or lacks a required one, has a span named for
// its route, child of the server span, with the outcome and the status sent.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
		outcome                       string
		stored                        string // "" when not set
		failed                        bool
		children                      []string
	}{
		{"first attempt", "POST", "/payments", "k1", "pay", 201, "first_attempt", "true", false, []string{"insert payment"}},
		{"replay", "POST", "/payments", "k1", "pay", 201, "replay", "", false, nil},
		{"mismatch", "POST", "/payments", "k1", "other", 422, "mismatch", "", false, nil},
		{"missing key", "POST", "/payments", "", "pay", 400, "missing_key", "", false, nil},
		{"two keys", "POST", "/payments", "k2,k3", "pay", 400, "rejected", "", false, nil},
		{"5xx not stored", "POST", "/payments", "k4", "fail", 500, "first_attempt", "false", true, []string{"insert payment"}},
		{"after a 5xx, runs again", "POST", "/payments", "k4", "pay", 201, "first_attempt", "true", false, []string{"insert payment"}},
		{"optional key, given", "POST", "/notes", "k5", "pay", 201, "first_attempt", "true", false, []string{"insert payment"}},
	} {
		f.exp.Reset()
		if got := f.do(tc.method, tc.path, tc.key, tc.body); got != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.status)
		}
		spans := f.exp.GetSpans()
		idem := named(spans, "idempotency")
		if len(idem) != 1 {
			t.Errorf("%s: %d idempotency spans, want 1", tc.name, len(idem))
			continue
		}
		s := idem[0]
		wantName := "idempotency POST " + tc.path
		if s.Name != wantName || s.Parent.SpanID() != named(spans, "server")[0].SpanContext.SpanID() {
			t.Errorf("%s: span %q parent %v, want %q, child of the server span", tc.name, s.Name, s.Parent.SpanID(), wantName)
		}
		a := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			a[kv.Key] = kv.Value.String()
		}
		if a["sqsinbox.idempotency.outcome"] != tc.outcome || a["http.response.status_code"] != itoa(tc.status) ||
			a["sqsinbox.idempotency.stored"] != tc.stored {
			t.Errorf("%s: attributes %v, want outcome %s, status %d, stored %q", tc.name, a, tc.outcome, tc.status, tc.stored)
		}
		if (s.Status.Code == codes.Error) != tc.failed {
			t.Errorf("%s: span status %v", tc.name, s.Status.Code)
		}
		var kids []string
		for _, k := range spans {
			if k.Parent.SpanID() == s.SpanContext.SpanID() {
				kids = append(kids, k.Name)
			}
		}
		if strings.Join(kids, ",") != strings.Join(tc.children, ",") {
			t.Errorf("%s: children %q, want %q", tc.name, kids, tc.children)
		}
	}

	// Requests the middleware does not cover, or that carry no key where none is required, get
	// no span of it.
	f.exp.Reset()
	f.do("GET", "/notes", "k6", "")
	f.do("POST", "/notes", "", "pay")
	if n := len(named(f.exp.GetSpans(), "idempotency")); n != 0 {
		t.Errorf("%d idempotency spans for pass-through requests, want 0", n)
	}
}

// TestConflict: a retry while the first attempt runs gets 409, and its span says conflict.
func TestConflict(t *testing.T) {
	t.Parallel()
	f := setup(t)
	done := make(chan int)
	go func() { done <- f.do("POST", "/payments", "k1", "hold") }()
	<-f.entered
	if got := f.do("POST", "/payments", "k1", "hold"); got != http.StatusConflict {
		t.Errorf("retry during the attempt: %d, want 409", got)
	}
	close(f.release)
	if got := <-done; got != http.StatusCreated {
		t.Errorf("first attempt: %d, want 201", got)
	}
	var outcomes []string
	for _, s := range named(f.exp.GetSpans(), "idempotency") {
		for _, kv := range s.Attributes {
			if kv.Key == idemotel.KeyOutcome {
				outcomes = append(outcomes, kv.Value.AsString())
			}
		}
	}
	if strings.Join(outcomes, ",") != "conflict,first_attempt" {
		t.Errorf("outcomes in the order the spans ended: %q, want conflict then first_attempt", outcomes)
	}
}

func named(spans tracetest.SpanStubs, prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func itoa(n int) string { return attribute.IntValue(n).String() }

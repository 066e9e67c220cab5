package workerotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker/workerotel"
)

// newInbox gives the test an inbox in a freshly migrated schema of its own, with a business
// table "effects", and the pool it uses.
func newInbox(t testing.TB, cfg inbox.Config) (*inbox.Inbox, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := "t_" + randHex(6)
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = schema
	ib, err := inbox.New(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib, pool, schema
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func nop(context.Context, pgx.Tx) error { return nil }

// TestInboxHooksPG: each claim and commit of Run, and RunTx's claim, is a child span of the
// caller's span with its outcome; the caller's span gets the claim's outcome, handler and key.
func TestInboxHooksPG(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	ib, pool, _ := newInbox(t, inbox.Config{Hooks: workerotel.InboxHooks(&workerotel.Config{TracerProvider: tp}),
		LockTimeout: 100 * time.Millisecond})
	tracer := tp.Tracer("test")
	run := func(name, key string, fn func(ctx context.Context) (inbox.Outcome, error)) (family, error) {
		exp.Reset()
		ctx, span := tracer.Start(t.Context(), name)
		_, err := fn(ctx)
		span.End()
		spans := exp.GetSpans()
		p := byName(spans, name)[0]
		return family{parent: p, kids: children(spans, p.SpanContext)}, err
	}

	// Fresh, then committed.
	got, err := run("first", "evt_1", func(ctx context.Context) (inbox.Outcome, error) { return ib.Run(ctx, "warehouse", "evt_1", nop) })
	if err != nil {
		t.Fatal(err)
	}
	got.want(t, []string{"inbox claim", "inbox commit"})
	wantAttrs(t, got.kids[0], map[attribute.Key]string{"sqsinbox.inbox.handler": "warehouse", "sqsinbox.inbox.event_key": "evt_1",
		"sqsinbox.inbox.outcome": "fresh"})
	wantAttrs(t, got.kids[1], map[attribute.Key]string{"sqsinbox.inbox.outcome": "committed"})
	wantAttrs(t, got.parent, map[attribute.Key]string{"sqsinbox.inbox.claim": "fresh", "sqsinbox.inbox.event_key": "evt_1"})

	// The same event again: a duplicate claim, no commit.
	got, err = run("second", "evt_1", func(ctx context.Context) (inbox.Outcome, error) { return ib.Run(ctx, "warehouse", "evt_1", nop) })
	if err != nil {
		t.Fatal(err)
	}
	got.want(t, []string{"inbox claim"})
	wantAttrs(t, got.kids[0], map[attribute.Key]string{"sqsinbox.inbox.outcome": "duplicate"})
	wantAttrs(t, got.parent, map[attribute.Key]string{"sqsinbox.inbox.claim": "duplicate", "sqsinbox.inbox.handler": "warehouse"})

	// A claim held by RunTx's open transaction blocks Run's: blocked, SQLSTATE 55P03.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	got, err = run("holder", "evt_2", func(ctx context.Context) (inbox.Outcome, error) { return ib.RunTx(ctx, tx, "warehouse", "evt_2", nop) })
	if err != nil {
		t.Fatal(err)
	}
	got.want(t, []string{"inbox claim"})
	wantAttrs(t, got.kids[0], map[attribute.Key]string{"sqsinbox.inbox.outcome": "fresh", "sqsinbox.inbox.in_tx": "true"})
	got, err = run("blocked", "evt_2", func(ctx context.Context) (inbox.Outcome, error) { return ib.Run(ctx, "warehouse", "evt_2", nop) })
	if !errors.Is(err, inbox.ErrClaimBlocked) {
		t.Fatalf("Run = %v, want ErrClaimBlocked", err)
	}
	got.want(t, []string{"inbox claim"})
	wantAttrs(t, got.kids[0], map[attribute.Key]string{"sqsinbox.inbox.outcome": "blocked", "db.response.status_code": "55P03"})
	if got.kids[0].Status.Code == codes.Error {
		t.Error("a blocked claim has status Error; it is retried, not failed")
	}

	// A claim that fails (ctx already ended) has status Error.
	got, err = run("failed", "evt_3", func(ctx context.Context) (inbox.Outcome, error) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ib.Run(ctx, "warehouse", "evt_3", nop)
	})
	if err == nil {
		t.Fatal("Run with an ended context succeeded")
	}
	got.want(t, []string{"inbox claim"})
	wantAttrs(t, got.kids[0], map[attribute.Key]string{"sqsinbox.inbox.outcome": "failed"})
	if got.kids[0].Status.Code != codes.Error {
		t.Errorf("failed claim: status %v, want Error", got.kids[0].Status.Code)
	}
}

// TestInboxHooksOmitEventKeyPG: with OmitEventKey, no span carries the key.
func TestInboxHooksOmitEventKeyPG(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	ib, _, _ := newInbox(t, inbox.Config{Hooks: workerotel.InboxHooks(&workerotel.Config{TracerProvider: tp, OmitEventKey: true})})
	ctx, span := tp.Tracer("test").Start(t.Context(), "process")
	if _, err := ib.Run(ctx, "warehouse", "jane@example.com", nop); err != nil {
		t.Fatal(err)
	}
	span.End()
	for _, s := range exp.GetSpans() {
		if v, ok := attrs(s)["sqsinbox.inbox.event_key"]; ok {
			t.Errorf("span %q has the event key %q", s.Name, v.String())
		}
	}
}

type family struct {
	parent tracetest.SpanStub
	kids   []tracetest.SpanStub
}

// want fails unless the parent's children are named names, in order.
func (ts family) want(t *testing.T, names []string) {
	t.Helper()
	var got []string
	for _, k := range ts.kids {
		got = append(got, k.Name)
	}
	if len(got) != len(names) {
		t.Fatalf("%s: children %q, want %q", ts.parent.Name, got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("%s: children %q, want %q", ts.parent.Name, got, names)
		}
	}
}

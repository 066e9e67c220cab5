package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// severalHandlers is a batch handler that sends each message to the inbox handler its "type"
// attribute names: one transaction, several inbox scopes.
type severalHandlers struct {
	b  *bundle
	hs map[string]*inboxhandler.Handler
}

func (s *severalHandlers) Handle(context.Context, *worker.Message) error {
	return errors.New("not batched")
}

func (s *severalHandlers) HandleBatch(ctx context.Context, b *worker.Batch) []error {
	return inboxhandler.HandleBatchWith(ctx, s.b.ib, b, func(m *worker.Message) (*inboxhandler.Handler, error) {
		typ, _ := m.Attribute("type")
		if h, ok := s.hs[typ]; ok {
			return h, nil
		}
		return nil, fmt.Errorf("no handler for type %q", typ)
	})
}

// TestBatchOfSeveralHandlers (PostgreSQL; no SQS server: worker.RunBatch): one batch, one
// transaction, serves two handlers. The same event id under each is two events, each applied
// once; a replay is two duplicates. In one FIFO group the order holds across the handlers: a
// loyalty message that fails holds back the warehouse message after it, and an unknown type
// fails and holds back its group too.
func TestBatchOfSeveralHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	fail := func(context.Context, pgx.Tx, *worker.Message) error { return errors.New("loyalty is down") }
	s := &severalHandlers{b: b, hs: map[string]*inboxhandler.Handler{}}
	for _, name := range []string{"warehouse", "loyalty"} {
		h, err := inboxhandler.New(b.ib, name, nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if string(m.Body) == `{"id":"evt_fail"}` {
				return fail(ctx, tx, m)
			}
			return b.effect(ctx, tx, m)
		})
		if err != nil {
			t.Fatal(err)
		}
		s.hs[name] = h
	}
	msg := func(typ, id, group string) *worker.Message {
		return &worker.Message{ID: typ + "-" + id, Body: fmt.Appendf(nil, `{"id":%q}`, id), GroupID: group,
			Attributes: map[string]types.MessageAttributeValue{"type": {DataType: aws.String("String"), StringValue: aws.String(typ)}}}
	}
	batch := []*worker.Message{
		msg("warehouse", "evt_1", ""), msg("loyalty", "evt_1", ""),
		msg("warehouse", "evt_g1", "g"), msg("loyalty", "evt_fail", "g"), msg("warehouse", "evt_g2", "g"),
		msg("unknown", "evt_h1", "h"), msg("warehouse", "evt_h2", "h"),
	}
	outcome := func(err error) string {
		switch {
		case err == nil:
			return "processed"
		case errors.Is(err, worker.ErrDuplicate):
			return "duplicate"
		case errors.Is(err, worker.ErrNotRun):
			return "released"
		}
		return "failed"
	}
	for round, want := range []string{
		"[processed processed processed failed released failed released]",
		"[duplicate duplicate duplicate failed released failed released]",
	} {
		res := worker.RunBatch(t.Context(), s, batch, time.Minute)
		got := make([]string, len(res))
		for i, err := range res {
			got[i] = outcome(err)
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("round %d: %v, want %s (%v)", round, got, want, res)
		}
	}
	for _, c := range []struct {
		handler, key string
		want         int
	}{{"warehouse", "evt_1", 1}, {"loyalty", "evt_1", 1}, {"warehouse", "evt_g1", 1}, {"warehouse", "evt_g2", 0}, {"warehouse", "evt_h2", 0}} {
		if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages WHERE handler = $1 AND event_id = $2`, c.handler, c.key); n != c.want {
			t.Errorf("%s/%s: %d claims, want %d", c.handler, c.key, n, c.want)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects WHERE event_id = 'evt_1'`); n != 2 {
		t.Errorf("evt_1: %d effects, want 2 (one per handler)", n)
	}
}

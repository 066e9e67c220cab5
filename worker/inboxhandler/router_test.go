package inboxhandler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

type orderEvent struct {
	ID      string `json:"id"`
	OrderID string `json:"order"`
}

// routedCounters counts every counter the worker reports.
type routedCounters struct {
	mu sync.Mutex
	c  map[worker.Counter]int
}

func (c *routedCounters) Add(k worker.Counter, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c[k] += n
}
func (c *routedCounters) Observe(worker.Histogram, time.Duration) {}
func (c *routedCounters) SetInFlight(int)                         {}
func (c *routedCounters) get(k worker.Counter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c[k]
}

// routerBundle is a router over b's inbox with three typed handlers, each writing (handler,
// event) to the routed table: "paid" for OrderPaid, "cancelled" for OrderCancelled, and
// "shipped" for OrderShipped, which fails the event evt_fail.
func routerBundle(t *testing.T, b *bundle, cfg *inboxhandler.RouterConfig) *inboxhandler.Router {
	t.Helper()
	if _, err := b.pool.Exec(t.Context(), `CREATE TABLE `+b.schema+`.routed (handler text NOT NULL, event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	r, err := inboxhandler.NewRouter(b.ib, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for typ, name := range map[string]string{"OrderPaid": "paid", "OrderCancelled": "cancelled", "OrderShipped": "shipped"} {
		h, err := inboxhandler.NewJSON(b.ib, name, func(ctx context.Context, tx pgx.Tx, m *worker.Message, e orderEvent) error {
			if e.ID == "evt_fail" {
				return errors.New("the carrier refused the order")
			}
			_, handler, _ := inbox.EventKey(ctx)
			_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.routed (handler, event_id) VALUES ($1, $2)`, handler, e.ID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Route(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (b *bundle) routed(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT handler || '/' || event_id, count(*) FROM `+b.schema+`.routed GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct {
		k string
		n int
	}, error) {
		var v struct {
			k string
			n int
		}
		err := row.Scan(&v.k, &v.n)
		return v, err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, v := range got {
		out[v.k] = v.n
	}
	return out
}

// TestRouter (the pass's SQS server, PostgreSQL): one queue carries three event types, each routed to its own
// typed handler with its own inbox name, on both paths (one message at a time, and batches).
// Every event is sent twice as OrderPaid and twice as OrderCancelled (half of the latter typed by
// a body field, not the attribute): each handler applies it once, and the second copies are
// duplicates. An OrderShipped whose handler fails and a message of an unknown type go the
// retry-then-DLQ way, and the unknown one's error names its type; the others are unaffected.
func TestRouter(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 10} {
		t.Run(fmt.Sprint("HandlerBatch=", batch), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			r := routerBundle(t, b, &inboxhandler.RouterConfig{TypeField: "type"})
			c := srv.Client()
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "router", MaxReceiveCount: 3})
			const n = 40
			var msgs []sqstest.Message
			for i := range n {
				id := fmt.Sprintf("evt_%d", i)
				paid := sqstest.Message{Body: fmt.Sprintf(`{"id":%q,"order":"o-%d"}`, id, i),
					Attributes: map[string]string{"type": "OrderPaid"}}
				cancelled := sqstest.Message{Body: fmt.Sprintf(`{"id":%q,"order":"o-%d"}`, id, i),
					Attributes: map[string]string{"type": "OrderCancelled"}}
				if i%2 == 1 {
					cancelled = sqstest.Message{Body: fmt.Sprintf(`{"id":%q,"order":"o-%d","type":"OrderCancelled"}`, id, i)}
				}
				msgs = append(msgs, paid, cancelled, paid, cancelled)
			}
			msgs = append(msgs,
				sqstest.Message{Body: `{"id":"evt_fail","order":"o-x"}`, Attributes: map[string]string{"type": "OrderShipped"}},
				sqstest.Message{Body: `{"id":"evt_ok","order":"o-y"}`, Attributes: map[string]string{"type": "OrderShipped"}},
				sqstest.Message{Body: `{"id":"evt_refund","order":"o-z"}`, Attributes: map[string]string{"type": "Refunded"}})
			if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
				t.Fatal(err)
			}
			met := &routedCounters{c: map[worker.Counter]int{}}
			logs := newLogCapture()
			w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, HandlerBatch: batch,
				Metrics: met, Logger: slog.New(logs), Backoff: func(int) time.Duration { return 0 }, Handler: r})
			sqstest.WaitCount(t, c, q.DLQURL, 2, 60*time.Second)
			sqstest.WaitCount(t, c, q.URL, 0, 60*time.Second)
			workertest.Stop(t, w)

			got := b.routed(t)
			for i := range n {
				for _, h := range []string{"paid", "cancelled"} {
					if k := fmt.Sprintf("%s/evt_%d", h, i); got[k] != 1 {
						t.Errorf("%s applied %d times, want 1", k, got[k])
					}
					delete(got, fmt.Sprintf("%s/evt_%d", h, i))
				}
			}
			if got["shipped/evt_ok"] != 1 {
				t.Errorf("shipped/evt_ok applied %d times, want 1", got["shipped/evt_ok"])
			}
			delete(got, "shipped/evt_ok")
			if len(got) != 0 {
				t.Errorf("unexpected effects: %v", got)
			}
			if p, d := met.get(worker.Processed), met.get(worker.Duplicates); p != 2*n+1 || d != 2*n {
				t.Errorf("processed %d, duplicates %d; want %d and %d", p, d, 2*n+1, 2*n)
			}
			if f := met.get(worker.Failed); f != 6 {
				t.Errorf("failed %d; want 2 messages × maxReceiveCount 3", f)
			}
			if !logs.has(`no handler for the message's type`, `type "Refunded"; routed types: [OrderCancelled OrderPaid OrderShipped]`) {
				t.Errorf("no failure log names the unknown type and the routed ones; logs:\n%s", logs)
			}
		})
	}
}

// TestRouterDiscardsUnknown (the pass's SQS server, PostgreSQL): with UnknownDiscard, a message of an
// unknown type, and one with no type at all, are deleted unrun, counted as discarded and logged
// with what they lacked; the routed ones are applied.
func TestRouterDiscardsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r := routerBundle(t, b, &inboxhandler.RouterConfig{Unknown: inboxhandler.UnknownDiscard})
	c := srv.Client()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "routerdiscard", MaxReceiveCount: 3})
	msgs := []sqstest.Message{
		{Body: `{"id":"evt_1","order":"o-1"}`, Attributes: map[string]string{"type": "OrderPaid"}},
		{Body: `{"id":"evt_2","order":"o-2"}`, Attributes: map[string]string{"type": "Refunded"}},
		{Body: `{"id":"evt_3","order":"o-3"}`},
	}
	if err := sqstest.Send(t.Context(), c, q.URL, msgs); err != nil {
		t.Fatal(err)
	}
	met := &routedCounters{c: map[worker.Counter]int{}}
	logs := newLogCapture()
	w := workertest.Start(t, c, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Metrics: met, Logger: slog.New(logs), Handler: r})
	sqstest.WaitCount(t, c, q.URL, 0, 30*time.Second)
	workertest.Stop(t, w)
	if got := b.routed(t); len(got) != 1 || got["paid/evt_1"] != 1 {
		t.Errorf("effects %v; want paid/evt_1 once", got)
	}
	if d, p, f := met.get(worker.Discarded), met.get(worker.Processed), met.get(worker.Failed); d != 2 || p != 1 || f != 0 {
		t.Errorf("discarded %d, processed %d, failed %d; want 2, 1, 0", d, p, f)
	}
	if n, err := sqstest.Count(t.Context(), c, q.DLQURL); err != nil || n != 0 {
		t.Errorf("DLQ holds %d (%v); want 0", n, err)
	}
	if !logs.has("discarded", `no handler for type "Refunded"`) || !logs.has("discarded", `no handler for no type (attribute "type")`) {
		t.Errorf("the discards are not logged with their types; logs:\n%s", logs)
	}
}

// TestRouterRefusesBadRoutes (no servers): what Route and NewRouter refuse, each with an error
// naming it.
func TestRouterRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	other := newInbox(t, b.pool, b.schema, nil)
	r, err := inboxhandler.NewRouter(b.ib, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := b.handler(t, nil)
	if err := r.Route("OrderPaid", h); err != nil {
		t.Fatal(err)
	}
	hOther, err := inboxhandler.New(other, "elsewhere", nil, b.effect)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ  string
		h    *inboxhandler.Handler
		want string
	}{
		{"", h, "the type is empty"},
		{"OrderCancelled", nil, `type "OrderCancelled": the handler is nil`},
		{"OrderPaid", h, `type "OrderPaid" is routed to handler warehouse already`},
		{"OrderShipped", hOther, "handler elsewhere uses another inbox"},
	} {
		if err := r.Route(tc.typ, tc.h); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Route(%q) = %v; want an error containing %q", tc.typ, err, tc.want)
		}
	}
	if _, err := inboxhandler.NewRouter(b.ib, &inboxhandler.RouterConfig{Unknown: 7}); err == nil || !strings.Contains(err.Error(), "RouterConfig.Unknown is 7") {
		t.Errorf("NewRouter(Unknown 7) = %v", err)
	}
	empty, _ := inboxhandler.NewRouter(b.ib, nil)
	if err := empty.CheckQueue(t.Context(), &worker.Queue{Name: "q"}); err == nil || !strings.Contains(err.Error(), "has no routes") {
		t.Errorf("CheckQueue of a router without routes = %v", err)
	}
}

// TestRouterConfigMessageType (no server: it reads messages only) reads a message's type as a
// Router does: the attribute first, then the body's field when one is configured, "" when there
// is none, and an error for a body field that is not a string.
func TestRouterConfigMessageType(t *testing.T) {
	t.Parallel()
	attr := func(k, v string) map[string]types.MessageAttributeValue {
		return map[string]types.MessageAttributeValue{k: {DataType: aws.String("String"), StringValue: aws.String(v)}}
	}
	for _, tc := range []struct {
		name    string
		cfg     inboxhandler.RouterConfig
		m       worker.Message
		want    string
		wantErr bool
	}{
		{"default attribute", inboxhandler.RouterConfig{}, worker.Message{Attributes: attr("type", "OrderPaid"), Body: []byte(`{"type":"X"}`)}, "OrderPaid", false},
		{"no attribute, body not read", inboxhandler.RouterConfig{}, worker.Message{Body: []byte(`{"type":"X"}`)}, "", false},
		{"named attribute", inboxhandler.RouterConfig{TypeAttribute: "kind"}, worker.Message{Attributes: attr("kind", "A")}, "A", false},
		{"body field", inboxhandler.RouterConfig{TypeField: "type"}, worker.Message{Body: []byte(`{"type":"X"}`)}, "X", false},
		{"attribute before field", inboxhandler.RouterConfig{TypeField: "type"}, worker.Message{Attributes: attr("type", "A"), Body: []byte(`{"type":"X"}`)}, "A", false},
		{"field absent", inboxhandler.RouterConfig{TypeField: "type"}, worker.Message{Body: []byte(`{"id":"1"}`)}, "", false},
		{"field not a string", inboxhandler.RouterConfig{TypeField: "type"}, worker.Message{Body: []byte(`{"type":7}`)}, "", true},
		{"body not JSON", inboxhandler.RouterConfig{TypeField: "type"}, worker.Message{Body: []byte(`nope`)}, "", true},
		{"TypeOf", inboxhandler.RouterConfig{TypeOf: func(*worker.Message) (string, error) { return "T", nil }}, worker.Message{Attributes: attr("type", "A")}, "T", false},
	} {
		got, err := tc.cfg.MessageType(&tc.m)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, inboxhandler.ErrBadBody)) {
			t.Errorf("%s: %q, %v; want %q (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestRouterTypeErrorsNameThePackageOnce (PostgreSQL, for the inbox; nothing is claimed): a
// message whose type cannot be read fails with one error that says "inboxhandler:" once, names
// the message, and wraps ErrBadBody; a TypeOf function's error is named as TypeOf's.
func TestRouterTypeErrorsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	boom := errors.New("no kind in the envelope")
	for _, tc := range []struct {
		name string
		cfg  inboxhandler.RouterConfig
		want string
		is   error
	}{
		{"a body that is not JSON", inboxhandler.RouterConfig{TypeField: "type"},
			`inboxhandler: the message body does not decode: message m-1: no "type" attribute, and the body is not a JSON object`, inboxhandler.ErrBadBody},
		{"TypeOf", inboxhandler.RouterConfig{TypeOf: func(*worker.Message) (string, error) { return "", boom }},
			"inboxhandler: router: message m-1: RouterConfig.TypeOf: no kind in the envelope", boom},
	} {
		r, err := inboxhandler.NewRouter(b.ib, &tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Route("OrderPaid", b.handler(t, nil)); err != nil {
			t.Fatal(err)
		}
		err = r.Handle(t.Context(), &worker.Message{ID: "m-1", Body: []byte("not json")})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Count(err.Error(), "inboxhandler") != 1 || !errors.Is(err, tc.is) {
			t.Errorf("%s: %v; want one error starting %q, saying inboxhandler once", tc.name, err, tc.want)
		}
	}
}

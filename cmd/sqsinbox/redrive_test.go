package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/s3payload"
)

// The classified redrive's tests: the pass's SQS server (GoAws or fauxqs) and PostgreSQL, with
// inbox rows made by the inbox's own claim (processEvent).

// routedDLQ makes a queue whose DLQ holds what a router's queue dead-letters: OrderPaid order-42
// (applied by orders-paid), OrderShipped order-42 (the same id under another type: another
// event, which orders-shipped never applied) and OrderRefunded order-7 (a type with no route).
func routedDLQ(t *testing.T, prefix string) (*sqstest.Queue, []string) {
	t.Helper()
	pool, dbArgs := migratedSchema(t, strings.ReplaceAll(prefix, "-", "_"))
	processEvent(t, pool, dbArgs[len(dbArgs)-1], "orders-paid", "order-42")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 3})
	typed := func(typ, id string) sqstest.Message {
		return sqstest.Message{Body: fmt.Sprintf(`{"id":%q}`, id), Attributes: map[string]string{"type": typ}}
	}
	msgs := []sqstest.Message{typed("OrderPaid", "order-42"), typed("OrderShipped", "order-42"), typed("OrderRefunded", "order-7")}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, msgs); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)
	return q, dbArgs
}

// TestRedriveRoutesEachTypeToItsHandler (the pass's SQS server, PostgreSQL): on a router's
// queue, the same id under two types is two events. With --route, the OrderPaid that
// orders-paid applied is deleted, the OrderShipped that orders-shipped never applied is moved
// back, and the type with no route is left, with the reason. With --handler orders-paid alone,
// no typed message is deleted: the OrderShipped is not taken for applied.
func TestRedriveRoutesEachTypeToItsHandler(t *testing.T) {
	t.Parallel()
	q, dbArgs := routedDLQ(t, "cli-rdroute")
	dlq := lastPart(q.DLQURL)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", dlq, "--to", q.Name}, extra...), dbArgs...)...)
	}
	r := redrive("--handler", "orders-paid", "--dry-run").mustOK(t)
	for _, want := range []string{"already applied: 0", "never applied: 3 (would be moved to " + q.Name + ")",
		"1: applied by orders-paid, but it carries a type (\"OrderPaid\")"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--handler alone on typed messages lacks %q:\n%s", want, r.stdout)
		}
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)

	r = redrive("--route", "OrderPaid=orders-paid", "--route", "OrderShipped=orders-shipped").mustOK(t)
	for _, want := range []string{"against the routes OrderPaid=orders-paid, OrderShipped=orders-shipped's inbox rows",
		"never applied: 1 (were moved to " + q.Name + ") [order-42]", "already applied: 1 (were deleted from the DLQ) [order-42]",
		"left in the DLQ: 1", `1: type "OrderRefunded" has no --route`, "moved 1 message from " + dlq} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive --route lacks %q:\n%s", want, r.stdout)
		}
	}
	if got := attributesIn(t, q.URL, 1, "type"); !slices.Equal(got, []string{"OrderShipped"}) {
		t.Errorf("moved back %v; want the OrderShipped only", got)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // the OrderRefunded

	redrive("--handler", "a", "--route", "T=b").mustFail(t, 2, "not both")
	redrive("--route", "T").mustFail(t, 2, `route "T": want TYPE=HANDLER`)
	redrive("--route", "T=a", "--route", "T=b").mustFail(t, 2, `type "T" is routed to a already`)
}

// TestConsoleRedriveWithRoutes (the pass's SQS server, PostgreSQL): the console's DLQ page offers
// the inbox's handlers to choose from, and a redrive with routes deletes only the event its
// type's handler applied, moves the other type's event with the same id, and leaves the type with
// no route; with one handler chosen and no routes, no typed message is deleted.
func TestConsoleRedriveWithRoutes(t *testing.T) {
	t.Parallel()
	q, dbArgs := routedDLQ(t, "cli-conroute")
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	session := tc.login()
	csrf := tc.csrf()
	r := tc.do(http.MethodGet, "/dlq?queue="+q.Name, nil, map[string]string{"Cookie": session.String()})
	if !strings.Contains(r.body, `<option value="orders-paid">orders-paid</option>`) || !strings.Contains(r.body, `name="routes"`) {
		t.Fatalf("the DLQ page does not offer the inbox's handlers and routes:\n%s", r.body)
	}

	form := url.Values{"csrf": {csrf}, "queue": {q.Name}, "handler": {"orders-paid"}, "mode": {"dry-run"}}
	r = tc.post("/redrive", form, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>0</b>already applied") || !strings.Contains(r.body, "<b>3</b>never applied") {
		t.Fatalf("preview against orders-paid alone: status %d\n%s", r.status, r.body)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)

	form.Set("routes", "OrderPaid=orders-paid OrderShipped=orders-shipped")
	if r := tc.post("/redrive", form, session); r.status != http.StatusBadRequest || !strings.Contains(r.body, "not both") {
		t.Errorf("a handler and routes: status %d\n%s", r.status, r.body)
	}
	form.Set("handler", "")
	form.Set("mode", "run")
	r = tc.post("/redrive", form, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>1</b>never applied: moved to "+q.Name) ||
		!strings.Contains(r.body, "<b>1</b>already applied: deleted") || !strings.Contains(r.body, `type &#34;OrderRefunded&#34; has no route among those given`) {
		t.Fatalf("redrive with routes: status %d\n%s", r.status, r.body)
	}
	if got := attributesIn(t, q.URL, 1, "type"); !slices.Equal(got, []string{"OrderShipped"}) {
		t.Errorf("moved back %v; want the OrderShipped only", got)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second)
	if log := tc.stderr.String(); !strings.Contains(log, "against the routes OrderPaid=orders-paid, OrderShipped=orders-shipped") {
		t.Errorf("the console's log lacks the routes:\n%s", log)
	}
}

// TestRedriveOffloadedKeyIsThePayloads (the pass's SQS server and PostgreSQL; fauxqs's S3 for
// the fetch, which GoAws lacks): a message whose payload is offloaded (a pointer body with
// ExtendedPayloadSize, no event_id) is keyed as the worker keys it, from the payload. Without
// --payload-buckets it is left, reported as offloaded with its key unknown, never as keyless;
// with them, the one whose payload's key warehouse applied is deleted, the other moved back with
// its pointer, and one in a bucket not allowed is left, saying so.
func TestRedriveOffloadedKeyIsThePayloads(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdoff")
	processEvent(t, pool, dbArgs[len(dbArgs)-1], "warehouse", "evt_off_done")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdoff", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	pointer := func(bucket, key string, size int) sqstest.Message {
		return sqstest.Message{Body: s3payload.Pointer{Bucket: bucket, Key: key}.Body(), Numbers: map[string]string{"ExtendedPayloadSize": strconv.Itoa(size)}}
	}
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", dlq, "--to", q.Name, "--handler", "warehouse"}, extra...), dbArgs...)...)
	}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, []sqstest.Message{pointer("no-such-bucket", "k", 24)}); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second)
	r := redrive().mustOK(t)
	for _, want := range []string{"left in the DLQ: 1", "1: offloaded: key unknown without the payload", "moved 0 messages"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("without --payload-buckets, lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "no valid key") {
		t.Errorf("an offloaded message reported as keyless:\n%s", r.stdout)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second)
	if n := queueCount(t, q.URL); n != 0 {
		t.Fatalf("the queue holds %d; want 0", n)
	}

	if why := srv.Lacks(sqstest.S3); why != "" {
		t.Logf("the fetch is not tested on this server: %s", why)
		return
	}
	c, err := srv.S3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := srv.CreateBucket(t.Context(), c, "cli-rdoff")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []sqstest.Message
	for _, id := range []string{"evt_off_done", "evt_off_new"} {
		body := fmt.Sprintf(`{"id":%q}`, id)
		if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(id), Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, pointer(bucket, id, len(body)))
	}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, msgs); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)
	r = redrive("--payload-buckets", bucket).mustOK(t)
	for _, want := range []string{"already applied: 1 (were deleted from the DLQ) [evt_off_done]", "never applied: 1 (were moved to " + q.Name + ") [evt_off_new]",
		"left in the DLQ: 1", "1: offloaded: the payload could not be fetched: s3payload: s3://no-such-bucket/k: the bucket is not among"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("with --payload-buckets, lacks %q:\n%s", want, r.stdout)
		}
	}
	ms := receiveAll(t, q.URL, 1)
	if p, err := s3payload.ParsePointer([]byte(aws.ToString(ms[0].Body))); err != nil || p.Key != "evt_off_new" || ms[0].MessageAttributes["ExtendedPayloadSize"].StringValue == nil {
		t.Errorf("moved back %q (%v); want the pointer to evt_off_new with its size attribute", aws.ToString(ms[0].Body), err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // the one in the bucket not allowed
}

// TestRedriveMaxBoundsEveryMessage (the pass's SQS server, PostgreSQL): --max counts every
// message handled, not only those moved: with three applied messages, --max 1 deletes one, and
// a dry run with --max 1 classifies one and stops receiving.
func TestRedriveMaxBoundsEveryMessage(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdmax")
	for _, k := range []string{"evt_m1", "evt_m2", "evt_m3"} {
		processEvent(t, pool, dbArgs[len(dbArgs)-1], "warehouse", k)
	}
	q := dlqWithEvents(t, "cli-rdmax", `{"id":"evt_m1"}`, `{"id":"evt_m2"}`, `{"id":"evt_m3"}`)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--handler", "warehouse", "--max", "1"}, extra...), dbArgs...)...)
	}
	r := redrive("--dry-run").mustOK(t)
	if !strings.Contains(r.stdout, "already applied: 1 (would be deleted") || !strings.Contains(r.stdout, "never applied: 0") {
		t.Errorf("dry run with --max 1:\n%s", r.stdout)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)
	r = redrive().mustOK(t)
	if !strings.Contains(r.stdout, "already applied: 1 (were deleted") {
		t.Errorf("--max 1:\n%s", r.stdout)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--max", "-1"}, dbArgs...)...).mustFail(t, 2, "--max must not be negative")
}

// TestRedriveLeavesWhatCouldOutliveItsInboxRow (the pass's SQS server, PostgreSQL): a copy
// restarts SQS's retention, so a message older than the inbox's retention less the queue's
// MessageRetentionPeriod (4 days here; 1 hour of inbox retention makes every message that old)
// is left with the reason; --allow-old moves it.
func TestRedriveLeavesWhatCouldOutliveItsInboxRow(t *testing.T) {
	t.Parallel()
	_, dbArgs := migratedSchema(t, "cli_rdold")
	q := dlqWithEvents(t, "cli-rdold", `{"id":"evt_old"}`)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--handler", "warehouse", "--inbox-retention", "1h"}, extra...), dbArgs...)...)
	}
	r := redrive().mustOK(t)
	if !strings.Contains(r.stdout, "left in the DLQ: 1") || !strings.Contains(r.stdout, "older than the inbox's retention (1h0m0s) less "+q.Name+"'s MessageRetentionPeriod (4d)") {
		t.Errorf("--inbox-retention 1h:\n%s", r.stdout)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second)
	if n := queueCount(t, q.URL); n != 0 {
		t.Fatalf("the queue holds %d; want 0", n)
	}
	r = redrive("--allow-old").mustOK(t)
	if !strings.Contains(r.stdout, "moved 1 message") {
		t.Errorf("--allow-old:\n%s", r.stdout)
	}
	if got := keysIn(t, q.URL, 1); !slices.Equal(got, []string{"evt_old"}) {
		t.Errorf("moved %v; want evt_old", got)
	}
}

// TestRedriveFIFOLeavesTheRestOfAGroup (servers that return several messages of one FIFO group
// in one receive, as SQS does; GoAws and fauxqs do not, so it runs against SQS itself): a keyless
// message left at the head of its group holds the rest of the group in the DLQ, so that none of
// them overtakes it; another group is moved.
func TestRedriveFIFOLeavesTheRestOfAGroup(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.FIFO, sqstest.GroupBatch)
	_, dbArgs := migratedSchema(t, "cli_rdgroup")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdgroup", FIFO: true, MaxReceiveCount: 3})
	msgs := []sqstest.Message{{Body: `{"no_id":1}`, GroupID: "g", DedupID: "g0"}, {Body: `{"id":"g-1"}`, GroupID: "g", DedupID: "g1"},
		{Body: `{"id":"g-2"}`, GroupID: "g", DedupID: "g2"}, {Body: `{"id":"h-1"}`, GroupID: "h", DedupID: "h1"}}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, msgs); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--handler", "warehouse"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "moved 1 message") || !strings.Contains(r.stdout, "left in the DLQ: 3") ||
		!strings.Contains(r.stdout, "2: behind a message of its FIFO group left in the DLQ") {
		t.Errorf("redrive:\n%s", r.stdout)
	}
	if ms := receiveAndDelete(t, q.URL, 1); !strings.Contains(aws.ToString(ms[0].Body), "h-1") {
		t.Errorf("moved %q; want h-1", aws.ToString(ms[0].Body))
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)
}

// bodyTypedDLQ makes a queue whose DLQ holds what a router's queue with a body-typed Router
// (RouterConfig.TypeField "type") dead-letters, with no type attribute: OrderPaid order-42
// (applied by orders-paid), OrderShipped order-42 (another event with the same id, which
// orders-shipped never applied) and OrderRefunded order-7 (a type with no route); and the routes
// its worker published at start, as an inboxhandler.Router publishes them.
func bodyTypedDLQ(t *testing.T, prefix string) (*sqstest.Queue, []string) {
	t.Helper()
	pool, dbArgs := migratedSchema(t, strings.ReplaceAll(prefix, "-", "_"))
	schema := dbArgs[len(dbArgs)-1]
	processEvent(t, pool, schema, "orders-paid", "order-42")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 3})
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Instance: "task-7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ib.PublishRoutes(t.Context(), inbox.Routes{Queue: q.Name, TypeAttribute: "type", TypeField: "type", Unknown: "fail",
		Routes: map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped"}}); err != nil {
		t.Fatal(err)
	}
	fillBodyTyped(t, q)
	return q, dbArgs
}

// fillBodyTyped sends bodyTypedDLQ's three messages to q's DLQ.
func fillBodyTyped(t *testing.T, q *sqstest.Queue) {
	t.Helper()
	var msgs []sqstest.Message
	for _, b := range []string{`{"id":"order-42","type":"OrderPaid"}`, `{"id":"order-42","type":"OrderShipped"}`, `{"id":"order-7","type":"OrderRefunded"}`} {
		msgs = append(msgs, sqstest.Message{Body: b})
	}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, msgs); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second)
}

// TestRedriveByThePublishedRoutes (the pass's SQS server, PostgreSQL): on a queue whose Router
// reads the type from the body, `redrive --from --to` with no other flag classifies by the routes
// its worker published: the OrderPaid that orders-paid applied is deleted, the OrderShipped with
// the same id (which orders-shipped never applied) is moved back, the type with no route is left,
// and the report names the routes' version. `--handler orders-paid` reads the type as the
// published routes say, so it deletes neither typed event, the OrderShipped least of all.
func TestRedriveByThePublishedRoutes(t *testing.T) {
	t.Parallel()
	q, dbArgs := bodyTypedDLQ(t, "cli-rdpub")
	dlq := lastPart(q.DLQURL)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", dlq, "--to", q.Name}, extra...), dbArgs...)...)
	}
	r := redrive("--handler", "orders-paid").mustOK(t)
	for _, want := range []string{"already applied: 0", "never applied: 3 (were moved to " + q.Name + ")",
		`1: applied by orders-paid, but it carries a type ("OrderPaid")`, `1: applied by orders-paid, but it carries a type ("OrderShipped")`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--handler orders-paid lacks %q:\n%s", want, r.stdout)
		}
	}
	if got := bodiesIn(t, q.URL, 3); !slices.Equal(got, []string{`{"id":"order-42","type":"OrderPaid"}`, `{"id":"order-42","type":"OrderShipped"}`,
		`{"id":"order-7","type":"OrderRefunded"}`}) {
		t.Errorf("moved back %v; want all three (none deleted on --handler's word)", got)
	}

	fillBodyTyped(t, q)
	r = redrive().mustOK(t)
	for _, want := range []string{"against the routes OrderPaid=orders-paid, OrderShipped=orders-shipped (published by the worker, version ",
		"routes published by queue " + q.Name + "'s worker: version ", "(instance task-7;", `type read from attribute "type", else body field "type"`,
		"already applied: 1 (were deleted from the DLQ) [order-42]", "never applied: 1 (were moved to " + q.Name + ") [order-42]",
		"left in the DLQ: 1", `1: type "OrderRefunded" has no route among those the worker published`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive with no flags lacks %q:\n%s", want, r.stdout)
		}
	}
	if got := bodiesIn(t, q.URL, 1); !slices.Equal(got, []string{`{"id":"order-42","type":"OrderShipped"}`}) {
		t.Errorf("moved back %v; want the OrderShipped only", got)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // the OrderRefunded

	r = redrive("--unclassified").mustOK(t)
	if !strings.Contains(r.stdout, "moved 1 message") {
		t.Errorf("--unclassified:\n%s", r.stdout)
	}
	redrive("--unclassified", "--handler", "h").mustFail(t, 2, "--unclassified moves every message unclassified")
}

// TestRedriveByThePublishedHandler (the pass's SQS server, PostgreSQL): on a queue whose worker
// runs one inboxhandler.Handler (payments-ledger, published as the queue's one handler),
// `redrive --from --to` with no other flag classifies every message against that handler,
// whatever its type: the event it applied is deleted, even though it carries a type (no other
// handler could take it), the one it never applied is moved back, and the report names the
// published version. The console's DLQ page shows the handler.
func TestRedriveByThePublishedHandler(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdone")
	schema := dbArgs[len(dbArgs)-1]
	processEvent(t, pool, schema, "payments-ledger", "pay-1")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdone", MaxReceiveCount: 3})
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Instance: "task-9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ib.PublishRoutes(t.Context(), inbox.Routes{Queue: q.Name, Handler: "payments-ledger"}); err != nil {
		t.Fatal(err)
	}
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, []sqstest.Message{
		{Body: `{"id":"pay-1","type":"PaymentTaken"}`}, {Body: `{"id":"pay-2","type":"PaymentTaken"}`}}); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	page := tc.do(http.MethodGet, "/dlq?queue="+q.Name, nil, map[string]string{"Cookie": tc.login().String()})
	if !strings.Contains(page.body, "every message to handler payments-ledger") {
		t.Errorf("the console's DLQ page does not show the published handler:\n%s", page.body)
	}
	r := cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name}, dbArgs...)...).mustOK(t)
	for _, want := range []string{"against handler payments-ledger (published by the worker, version ", "(instance task-9;",
		"already applied: 1 (were deleted from the DLQ) [pay-1]", "never applied: 1 (were moved to " + q.Name + ") [pay-2]"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive by the published handler lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "type read from") || strings.Contains(r.stdout, "carries a type") {
		t.Errorf("a one-handler queue's redrive reads types:\n%s", r.stdout)
	}
	if got := bodiesIn(t, q.URL, 1); !slices.Equal(got, []string{`{"id":"pay-2","type":"PaymentTaken"}`}) {
		t.Errorf("moved back %v; want pay-2 only", got)
	}
}

// TestConsoleRedriveByThePublishedRoutes (the pass's SQS server, PostgreSQL): the console's DLQ
// page shows the routes the queue's worker published, and a redrive with neither a handler nor
// routes chosen classifies by them: the applied OrderPaid deleted, the OrderShipped with the
// same id moved, the unrouted type left, saying the published routes have no route for it.
func TestConsoleRedriveByThePublishedRoutes(t *testing.T) {
	t.Parallel()
	q, dbArgs := bodyTypedDLQ(t, "cli-conpub")
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	session := tc.login()
	r := tc.do(http.MethodGet, "/dlq?queue="+q.Name, nil, map[string]string{"Cookie": session.String()})
	if !strings.Contains(r.body, `id="published-routes"`) || !strings.Contains(r.body, "OrderPaid=orders-paid, OrderShipped=orders-shipped") {
		t.Fatalf("the DLQ page does not show the published routes:\n%s", r.body)
	}
	form := url.Values{"csrf": {tc.csrf()}, "queue": {q.Name}, "mode": {"run"}}
	r = tc.post("/redrive", form, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>1</b>never applied: moved to "+q.Name) ||
		!strings.Contains(r.body, "<b>1</b>already applied: deleted") || !strings.Contains(r.body, `type &#34;OrderRefunded&#34; has no route among those the worker published`) {
		t.Fatalf("redrive by the published routes: status %d\n%s", r.status, r.body)
	}
	if got := bodiesIn(t, q.URL, 1); !slices.Equal(got, []string{`{"id":"order-42","type":"OrderShipped"}`}) {
		t.Errorf("moved back %v; want the OrderShipped only", got)
	}
}

// bodiesIn receives n messages from the queue and returns their bodies, sorted.
func bodiesIn(t *testing.T, queueURL string, n int) []string {
	t.Helper()
	var got []string
	for _, m := range receiveAndDelete(t, queueURL, n) {
		got = append(got, aws.ToString(m.Body))
	}
	slices.Sort(got)
	return got
}

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestSendAttrRefuses (no servers): what --attr refuses, each with a message naming the flag's
// value and SQS's rule.
func TestSendAttrRefuses(t *testing.T) {
	t.Parallel()
	eleven := make([]string, 10)
	for i := range eleven {
		eleven[i] = fmt.Sprintf("a%d=x", i)
	}
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"type"}, `--attr "type": no '='`},
		{[]string{"ty pe=x"}, `the name has ' ' at byte 2`},
		{[]string{"é=x"}, "at byte 0; only A-Z a-z 0-9"},
		{[]string{strings.Repeat("n", 257) + "=x"}, "the name is 257 bytes; at most 256"},
		{[]string{".type=x"}, "the name starts or ends with a period"},
		{[]string{"type.=x"}, "the name starts or ends with a period"},
		{[]string{"a..b=x"}, "the name has two periods in a row"},
		{[]string{"AWS.TraceHeader=x"}, "the name starts with a prefix AWS reserves"},
		{[]string{"amazon.x=x"}, "the name starts with a prefix AWS reserves"},
		{[]string{"=x"}, "the name is empty"},
		{[]string{"event_id=e1"}, "send sets event_id itself"},
		{[]string{"type=a", "type=b"}, "type is given twice"},
		{[]string{"type="}, "the value is empty"},
		{[]string{"n:Number=five"}, `"five" is not a decimal number`},
		{[]string{"n:Number=1e127"}, "is outside -10^128 to 10^126"},
		{[]string{"n:Number=" + strings.Repeat("1", 39)}, "more than 38 significant digits"},
		{[]string{"b:Binary=AA=="}, `type "Binary"`},
		{eleven, "10 --attr and event_id make 11 message attributes; SQS takes at most 10"},
	} {
		_, _, err := parseAttrs(tc.specs, "event_id")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseAttrs(%q) = %v; want an error with %q", tc.specs, err, tc.want)
		}
	}
	attrs, size, err := parseAttrs([]string{"type=OrderPaid", "amount:Number=-5.25e3", "x.y-z_1:String=a=b"}, "event_id")
	if err != nil || aws.ToString(attrs["amount"].DataType) != "Number" || aws.ToString(attrs["x.y-z_1"].StringValue) != "a=b" ||
		size != len("type")+len("String")+len("OrderPaid")+len("amount")+len("Number")+len("-5.25e3")+len("x.y-z_1")+len("String")+len("a=b") {
		t.Errorf("parseAttrs: %v, %d, %v", attrs, size, err)
	}
}

// TestSendAttrReachesRouter (the pass's SQS server, GoAws or fauxqs, and PostgreSQL): `send
// --attr type=...` gives each message the attribute from which an inboxhandler.Router with its
// default type source picks the handler, and a Number attribute arrives as one. Two OrderPaid
// events (one sent twice) and an OrderCancelled reach their own routes, once each.
func TestSendAttrReachesRouter(t *testing.T) {
	t.Parallel()
	ib, schema := cliInbox(t, inbox.Config{})
	r, err := inboxhandler.NewRouter(ib, nil)
	if err != nil {
		t.Fatal(err)
	}
	for typ, name := range map[string]string{"OrderPaid": "warehouse", "OrderCancelled": "warehouse-cancel"} {
		h, err := inboxhandler.New(ib, name, nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			key, _, _ := inbox.EventKey(ctx)
			amount := ""
			if a, ok := m.Attributes["amount"]; ok {
				amount = aws.ToString(a.DataType) + ":" + aws.ToString(a.StringValue)
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects (event_id) VALUES ($1)`, name+"/"+key+"/"+amount)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Route(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-attr", MaxReceiveCount: 5})
	cli(t, `{"id":"evt_1"}`+"\n"+`{"id":"evt_2"}`+"\n"+`{"id":"evt_1"}`+"\n",
		"send", "--queue", q.URL, "--attr", "type=OrderPaid", "--attr", "amount:Number=5").mustOK(t)
	cli(t, `{"id":"evt_1"}`, "send", "--queue", q.URL, "--attr", "type=OrderCancelled").mustOK(t)
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: r})
	want := map[string]bool{"warehouse/evt_1/Number:5": true, "warehouse/evt_2/Number:5": true, "warehouse-cancel/evt_1/": true}
	var got []string
	sqstest.WaitFor(t, time.Minute, "each event applied by its route once", func() (bool, string) {
		rows, err := ib.Pool().Query(t.Context(), `SELECT event_id FROM `+schema+`.effects ORDER BY 1`)
		if err != nil {
			return false, err.Error()
		}
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return false, err.Error()
		}
		ok := len(got) == len(want)
		for _, g := range got {
			ok = ok && want[g]
		}
		return ok, fmt.Sprintf("applied %q", got)
	})
	workertest.Stop(t, w)
}

// TestSendRaw (the pass's SQS server): --raw sends a line that is not JSON as it is, without
// event_id, with the --attr attributes; without --raw it is refused, naming the flag.
func TestSendRaw(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-raw"})
	r := cli(t, "not json {\n", "send", "--queue", q.URL)
	if r.code == 0 || !strings.Contains(lastLine(r.stderr), "stdin line 1: not valid JSON (use --raw to send it as it is)") {
		t.Fatalf("send without --raw: exit %d, %q", r.code, r.stderr)
	}
	cli(t, "not json {\n", "send", "--queue", q.URL, "--raw", "--attr", "type=OrderPaid").mustOK(t)
	m := receiveAll(t, q.URL, 1)[0]
	if aws.ToString(m.Body) != "not json {" {
		t.Errorf("body %q, want %q", aws.ToString(m.Body), "not json {")
	}
	if _, ok := m.MessageAttributes["event_id"]; ok || aws.ToString(m.MessageAttributes["type"].StringValue) != "OrderPaid" {
		t.Errorf("attributes %v; want type=OrderPaid and no event_id", m.MessageAttributes)
	}
}

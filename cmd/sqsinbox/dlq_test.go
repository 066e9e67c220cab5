package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// dlqKit is a queue whose DLQ holds, by key: evt_poison (dead-lettered by a worker whose handler
// failed it 3 times, so its failures are recorded), evt_applied (applied by warehouse, its delete
// lost), evt_never (applied by no handler) and a message without a valid key.
type dlqKit struct {
	q      *sqstest.Queue
	dlq    string
	dbArgs []string
	ib     *inbox.Inbox
	ids    map[string]string // message id by key ("" for the keyless one)
}

func setupDLQ(t *testing.T, prefix string) *dlqKit {
	t.Helper()
	ib, schema := cliInbox(t, inbox.Config{Instance: "task-7"})
	k := &dlqKit{ib: ib, dbArgs: []string{"--database-url", db.URL, "--schema", schema}, ids: map[string]string{}}
	processEvent(t, ib.Pool(), schema, "warehouse", "evt_applied")
	k.q = srv.CreateQueue(t, sqstest.QueueOptions{Prefix: prefix, MaxReceiveCount: 3})
	k.dlq = lastPart(k.q.DLQURL)
	c := srv.Client()
	if err := sqstest.Send(t.Context(), c, k.q.URL, []sqstest.Message{{Body: `{"id":"evt_poison"}`}}); err != nil {
		t.Fatal(err)
	}
	h, err := inboxhandler.New(ib, "warehouse", nil, func(context.Context, pgx.Tx, *worker.Message) error {
		return errors.New("out of boxes in aisle 7")
	})
	if err != nil {
		t.Fatal(err)
	}
	w := workertest.Start(t, c, &worker.Config{QueueURL: k.q.URL, WaitTime: time.Second, Handler: h,
		Backoff: func(int) time.Duration { return 0 }})
	sqstest.WaitCount(t, c, k.q.DLQURL, 1, 60*time.Second)
	workertest.Stop(t, w)
	if err := sqstest.Send(t.Context(), c, k.q.DLQURL, []sqstest.Message{{Body: `{"id":"evt_applied"}`}, {Body: `{"id":"evt_never"}`}, {Body: `not json`}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range receiveAll(t, k.q.DLQURL, 4) {
		key, _ := messageKey(m)
		k.ids[key] = aws.ToString(m.MessageId)
		if _, err := c.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(k.q.DLQURL),
			ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func (k *dlqKit) cli(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, "", append(append([]string{"dlq"}, args...), k.dbArgs...)...)
}

// TestDLQPeekShowsFailures (the pass's SQS server, PostgreSQL): dlq peek shows each message of
// the DLQ with its key and the failures its handler recorded, found by the message id, which SQS
// keeps when it dead-letters a message: the worker's three failures of evt_poison, with the
// error; none for the others.
func TestDLQPeekShowsFailures(t *testing.T) {
	t.Parallel()
	k := setupDLQ(t, "cli-dlqpeek")
	var got struct {
		Messages []struct {
			ID       string          `json:"message_id"`
			Key      string          `json:"event_id"`
			KeyErr   string          `json:"key_error"`
			Failures []inbox.Failure `json:"failures"`
		} `json:"messages"`
	}
	// A receive may return fewer than are there: peek until all four were seen.
	seen := map[string]int{}
	sqstest.WaitFor(t, 60*time.Second, "a peek of the 4 messages", func() (bool, string) {
		r := k.cli(t, "peek", "--from", k.dlq, "--json").mustOK(t)
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		for _, m := range got.Messages {
			seen[m.Key] = len(m.Failures)
			if m.Key == "evt_poison" {
				for _, f := range m.Failures {
					if f.MessageID != m.ID || f.Handler != "warehouse" || f.Error != "out of boxes in aisle 7" || f.Queue != k.q.Name || f.Instance != "task-7" {
						t.Errorf("failure of evt_poison: %+v", f)
					}
				}
			}
			if m.Key == "" && !strings.Contains(m.KeyErr, "id") {
				t.Errorf("keyless message: key error %q", m.KeyErr)
			}
		}
		return len(seen) == 4, ""
	})
	if seen["evt_poison"] != 3 || seen["evt_applied"] != 0 || seen["evt_never"] != 0 {
		t.Errorf("failures per key %v; want 3 for evt_poison, none for the others", seen)
	}
	r := k.cli(t, "peek", "--from", k.dlq, "--max", "10").mustOK(t)
	if !strings.Contains(r.stdout, "received from "+k.dlq+" and made visible again") || !strings.Contains(r.stdout, "LAST FAILURE") {
		t.Errorf("peek table:\n%s", r.stdout)
	}
	if seen := strings.Contains(r.stdout, "evt_poison"); seen && !strings.Contains(r.stdout, "warehouse, receive ") {
		t.Errorf("peek table without evt_poison's last failure:\n%s", r.stdout)
	}
	k.cli(t, "peek", "--from", k.dlq, "--max", "11").mustFail(t, 2, "--max 11: want 1 to 10")
}

// TestDLQDiscard (the pass's SQS server, PostgreSQL): dlq discard deletes only the messages
// named, records who and why, refuses an event no handler applied (and a message without a key)
// unless --force, reports a message it cannot find, exits 1 when any was not discarded, and makes
// the messages it received and kept visible again at once, not after its 30 s hold.
func TestDLQDiscard(t *testing.T) {
	t.Parallel()
	k := setupDLQ(t, "cli-dlqdisc")
	k.cli(t, "discard", "--from", k.dlq, k.ids["evt_applied"]).mustFail(t, 2, "--reason is required")
	k.cli(t, "discard", "--from", k.dlq, "--reason", "x").mustFail(t, 2, "discard takes the message ids")
	k.cli(t, "discard", "--from", k.dlq, "--reason", "x", "a", "a").mustFail(t, 2, "named twice")

	missing := "00000000-0000-4000-8000-000000000000"
	start := time.Now()
	r := k.cli(t, "discard", "--from", k.dlq, "--by", "ana", "--reason", "refunded by hand",
		k.ids["evt_applied"], k.ids["evt_never"], k.ids[""], missing)
	r.mustFail(t, 1, "3 messages of 4 not discarded")
	for _, want := range []string{
		"discarded " + k.ids["evt_applied"] + " (event evt_applied, applied by warehouse)",
		"refused " + k.ids["evt_never"] + " (event evt_never, applied by no handler): deleting it loses the event; --force discards it anyway",
		"refused " + k.ids[""] + " (no valid key",
		"not found " + missing,
		"1 message discarded from " + k.dlq + "; 2 refused, 0 failed, 1 not found",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("discard lacks %q:\n%s", want, r.stdout)
		}
	}
	// Everything it kept is visible again now: three receives' worth, well before the 30 s hold.
	got := map[string]bool{}
	deadline := start.Add(discardHold - time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(k.q.DLQURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got[aws.ToString(m.MessageId)] = true
		}
	}
	for _, key := range []string{"evt_poison", "evt_never", ""} {
		if !got[k.ids[key]] {
			t.Errorf("message of %q not visible again within the hold (saw %v)", key, got)
		}
	}
	if got[k.ids["evt_applied"]] {
		t.Errorf("the discarded message is still in the DLQ")
	}

	r = k.cli(t, "discard", "--from", k.dlq, "--by", "ana", "--reason", "a test event", "--force", k.ids["evt_never"]).mustOK(t)
	if !strings.Contains(r.stdout, "discarded "+k.ids["evt_never"]+" (event evt_never, applied by no handler, forced)") {
		t.Errorf("discard --force:\n%s", r.stdout)
	}
	ds, err := k.ib.Discards(t.Context(), []string{k.ids["evt_applied"], k.ids["evt_never"], k.ids[""]})
	if err != nil || len(ds) != 2 {
		t.Fatalf("discards recorded: %v %+v; want 2", err, ds)
	}
	if d := ds[0]; d.MessageID != k.ids["evt_never"] || !d.Forced || d.By != "ana" || d.Reason != "a test event" || d.Queue != k.dlq || d.EventID != "evt_never" {
		t.Errorf("forced discard recorded as %+v", d)
	}
	if d := ds[1]; d.MessageID != k.ids["evt_applied"] || d.Forced || d.Reason != "refunded by hand" {
		t.Errorf("discard recorded as %+v", d)
	}
	sqstest.WaitCount(t, srv.Client(), k.q.DLQURL, 2, 60*time.Second)
}

// TestConsoleDLQFailuresAndDiscard (the pass's SQS server, PostgreSQL): the console's peek and its
// event lookup show the recorded failures (the worker's error for evt_poison); its discard needs the
// token like every action, deletes only the ticked messages whose event a handler applied,
// refuses the others unless forced, and records the name given and the reason.
func TestConsoleDLQFailuresAndDiscard(t *testing.T) {
	t.Parallel()
	k := setupDLQ(t, "cli-condisc")
	tc := startConsole(t, append([]string{"--queue", k.q.Name, "--token", testToken}, k.dbArgs...)...)
	csrf := tc.csrf()
	discard := url.Values{"csrf": {csrf}, "queue": {k.q.Name}, "message": {k.ids["evt_applied"], k.ids["evt_never"]}, "reason": {"refunded by hand"}, "by": {"ana"}}
	if r := tc.post("/dlq/discard", discard, nil); r.status != http.StatusForbidden || !strings.Contains(r.body, "not signed in") {
		t.Fatalf("discard without signing in: status %d\n%s", r.status, r.body)
	}
	session := tc.login()
	sqstest.WaitFor(t, 60*time.Second, "a peek showing evt_poison's failure", func() (bool, string) {
		r := tc.peek(k.q.Name, session)
		if r.status != http.StatusOK {
			t.Fatalf("peek: status %d\n%s", r.status, r.body)
		}
		return strings.Contains(r.body, "evt_poison") && strings.Contains(r.body, "out of boxes in aisle 7") &&
			strings.Contains(r.body, `name="message" value="`+k.ids["evt_poison"]+`"`), r.body
	})
	// The event lookup shows the failures too, with the whole text on request.
	if r := tc.get("/?key=evt_poison"); r.status != http.StatusOK || !strings.Contains(r.body, `id="lookup-failures"`) ||
		strings.Count(r.body, "<summary>out of boxes in aisle 7</summary>") != 3 {
		t.Errorf("lookup of evt_poison: status %d\n%s", r.status, r.body)
	}
	noReason := url.Values{"csrf": {csrf}, "queue": {k.q.Name}, "message": {k.ids["evt_applied"]}}
	if r := tc.post("/dlq/discard", noReason, session); r.status != http.StatusBadRequest || !strings.Contains(r.body, "--reason is required") {
		t.Errorf("discard without a reason: status %d\n%s", r.status, r.body)
	}
	r := tc.post("/dlq/discard", discard, session)
	if r.status != http.StatusOK || !strings.Contains(r.body, "<b>1</b>discarded") || !strings.Contains(r.body, "<b>1</b>refused") ||
		!strings.Contains(r.body, "refused "+k.ids["evt_never"]) {
		t.Fatalf("discard: status %d\n%s", r.status, r.body)
	}
	sqstest.WaitCount(t, srv.Client(), k.q.DLQURL, 3, 60*time.Second)
	ds, err := k.ib.Discards(t.Context(), []string{k.ids["evt_applied"], k.ids["evt_never"]})
	if err != nil || len(ds) != 1 || ds[0].By != "ana (console)" || ds[0].Reason != "refunded by hand" || ds[0].MessageID != k.ids["evt_applied"] {
		t.Fatalf("discards recorded: %v %+v", err, ds)
	}
	discard.Set("force", "1")
	discard["message"] = []string{k.ids["evt_never"]}
	if r := tc.post("/dlq/discard", discard, session); r.status != http.StatusOK || !strings.Contains(r.body, "<b>1</b>discarded") {
		t.Fatalf("forced discard: status %d\n%s", r.status, r.body)
	}
	sqstest.WaitCount(t, srv.Client(), k.q.DLQURL, 2, 60*time.Second)
	if log := tc.stderr.String(); !strings.Contains(log, `discard from `+k.dlq+` by "ana (console)"`) {
		t.Errorf("the discard is not in the console's log:\n%s", log)
	}
}

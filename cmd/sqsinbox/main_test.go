package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The CLI's tests run the commands in-process against a real PostgreSQL (a throwaway cluster,
// or TEST_DATABASE_URL) and a real SQS server (GoAws started by the harness, or
// AWS_ENDPOINT_URL_SQS). CloudWatch is the exception: no server for it is available here, so a
// wire-level stand-in answers every call (see cloudWatch), and no test reaches the real one.
var (
	db  *pgtest.Server
	srv *sqstest.Server
	cw  *cloudWatch
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

// testMain stops what it started before the process exits: a GoAws left running outlives the
// test binary.
func testMain(m *testing.M) int {
	ctx := context.Background()
	s, err := sqstest.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv = s
	defer srv.Close()
	d, err := pgtest.Start(ctx, "cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db = d
	defer db.Close()
	cw = startCloudWatch()
	defer cw.Close()
	_ = os.Setenv("AWS_ENDPOINT_URL_CLOUDWATCH", cw.URL)
	return m.Run()
}

type result struct {
	code           int
	stdout, stderr string
}

func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (r result) mustOK(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		r := cli(t, "", c.name, "--help")
		if r.code != 0 || !strings.Contains(r.stderr, "Example:") || !strings.Contains(r.stderr, "sqsinbox "+c.name) {
			t.Errorf("%s --help: exit %d, stderr %q; want 0 and an example", c.name, r.code, r.stderr)
		}
	}
	if r := cli(t, "", "frobnicate"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %+v", r)
	}
}

// mustFail checks that the command exited with code, with a last line on stderr that holds
// each of want, and returns that line.
func (r result) mustFail(t *testing.T, code int, want ...string) string {
	t.Helper()
	line := lastLine(r.stderr)
	for _, w := range want {
		if r.code != code || !strings.Contains(line, w) {
			t.Fatalf("exit %d, last line %q; want exit %d and %q\nstdout: %s", r.code, line, code, w, r.stdout)
		}
	}
	return line
}

// lastLine is what an operator sees last: one line naming what failed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestErrorsAreOneClearLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad flag", []string{"purge", "--older-than", "soon", "--database-url", db.URL}, 2, `"soon" is not a duration`},
		{"short purge", []string{"purge", "--older-than", "3d", "--database-url", db.URL}, 2, "under 7 days"},
		{"short key purge", []string{"purge", "--keys-older-than", "12h", "--database-url", db.URL}, 2, "--keys-older-than 12h is under 24h"},
		{"unknown flag", []string{"migrate", "--nope", "up"}, 2, "flag provided but not defined: -nope"},
		{"no action", []string{"migrate", "--database-url", db.URL}, 2, "want exactly one of up, down or status"},
		{"unreachable database", []string{"migrate", "--database-url", "postgres://u:secretpw@127.0.0.1:1/x?connect_timeout=2", "up"}, 1, "unreachable"},
		{"hostile schema", []string{"migrate", "--database-url", db.URL, "--schema", `x"; drop table t; --`, "up"}, 1, "not a valid identifier"},
		{"missing queue", []string{"stats", "--no-db", "--queue", "no-such-queue-" + randSuffix()}, 1, "does not exist"},
		{"send without queue", []string{"send"}, 2, "--queue is required"},
		{"copy without --to", []string{"redrive", "--from", "x", "--mode", "copy"}, 2, "--mode copy needs --to"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, "", tc.args...)
			line := lastLine(r.stderr)
			if r.code != tc.code || !strings.Contains(line, tc.want) || !strings.HasPrefix(line, "sqsinbox ") {
				t.Fatalf("exit %d, last line %q; want exit %d and a line containing %q", r.code, line, tc.code, tc.want)
			}
			if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "secretpw") {
				t.Fatalf("stderr has a stack trace or a secret:\n%s", r.stderr)
			}
		})
	}
}

func TestMigrateStatusPurgeStats(t *testing.T) {
	t.Parallel()
	schema := "cli_" + randSuffix()
	dbArgs := []string{"--database-url", db.URL, "--schema", schema}
	r := cli(t, "", append(append([]string{"migrate"}, dbArgs...), "status")...).mustOK(t)
	if !strings.Contains(r.stdout, "pending") {
		t.Fatalf("status before up: %s", r.stdout)
	}
	r = cli(t, "", append(append([]string{"migrate"}, dbArgs...), "up")...).mustOK(t)
	if !strings.Contains(r.stdout, "applied 0001") {
		t.Fatalf("up: %s", r.stdout)
	}
	r = cli(t, "", append(append([]string{"migrate"}, dbArgs...), "up")...).mustOK(t)
	if !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("second up: %s", r.stdout)
	}
	r = cli(t, "", append(append([]string{"migrate"}, dbArgs...), "status")...).mustOK(t)
	if strings.Contains(r.stdout, "pending") || !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "0001 processed_messages") {
		t.Fatalf("status after up: %s", r.stdout)
	}

	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id, seen_at)
		SELECT h, 'e' || g, now() - make_interval(days => g) FROM generate_series(1, 30) g, unnest(ARRAY['warehouse', 'loyalty']) h`)
	if err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", append([]string{"stats"}, dbArgs...)...).mustOK(t)
	for _, want := range []string{"HANDLER", "loyalty", "warehouse", "30"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stats lacks %q:\n%s", want, r.stdout)
		}
	}
	// Rows 14..30 days old go (the 14-day ones were stamped a moment before the purge reads the
	// clock): 17 per handler; 1..13 stay.
	r = cli(t, "", append([]string{"purge", "--older-than", "14d", "--skip-queue-check", "--batch-size", "5"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "deleted 34 rows") || !strings.Contains(r.stdout, "in 7 batches") {
		t.Fatalf("purge: %s", r.stdout)
	}
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.processed_messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 26 {
		t.Fatalf("rows left = %d, want 26", left)
	}
	r = cli(t, "", append(append([]string{"migrate"}, dbArgs...), "down", "--all", "--yes")...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted") {
		t.Fatalf("down: %s", r.stdout)
	}
}

func receiveAll(t *testing.T, url string, want int) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Messages...)
	}
	if len(got) != want {
		t.Fatalf("received %d messages, want %d", len(got), want)
	}
	return got
}

func TestSendWithRepeatSetsEventID(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-send"})
	in := `{"id":"evt_1","order_id":"o-1"}` + "\n" + `{"id":"evt_2","order_id":"o-2"}` + "\n\n" + `{"id":"evt_3"}` + "\n"
	r := cli(t, in, "send", "--queue", q.Name, "--repeat", "3", "--rate", "200").mustOK(t)
	if !strings.Contains(r.stdout, "sent 9 messages (3 lines × 3)") {
		t.Fatalf("send: %s", r.stdout)
	}
	perKey := map[string]int{}
	for _, m := range receiveAll(t, q.URL, 9) {
		a, ok := m.MessageAttributes["event_id"]
		if !ok {
			t.Fatalf("message %s has no event_id", aws.ToString(m.Body))
		}
		perKey[aws.ToString(a.StringValue)]++
	}
	if perKey["evt_1"] != 3 || perKey["evt_2"] != 3 || perKey["evt_3"] != 3 {
		t.Fatalf("per key = %v, want 3 each", perKey)
	}
}

func TestSendRefusesBadLinesAndSendsNothing(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-bad"})
	for _, tc := range []struct{ in, want string }{
		{`{"id":"ok"}` + "\n" + `{not json`, "stdin line 2: not valid JSON"},
		{`{"id":"ok"}` + "\n" + `{"order":"no id"}`, `stdin line 2: inbox: invalid event key from JSON field "id": missing`},
		{`{"id":"` + strings.Repeat("x", 600) + `"}`, "at most 512"},
	} {
		r := cli(t, tc.in, "send", "--queue", q.URL)
		if r.code != 1 || !strings.Contains(lastLine(r.stderr), tc.want) {
			t.Errorf("send %.30q: exit %d, %q; want %q", tc.in, r.code, lastLine(r.stderr), tc.want)
		}
	}
	attrs, err := srv.Client().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := attrs.Attributes["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("queue holds %s messages after refused sends, want 0", n)
	}
	r := cli(t, `{"order":"no id"}`, "send", "--queue", q.URL, "--allow-no-key").mustOK(t)
	if !strings.Contains(r.stdout, "sent 1 message (1 line × 1)") {
		t.Fatalf("--allow-no-key: %s", r.stdout)
	}
}

func TestRedriveKeepsTheEventKey(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-redrive", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	var lines []string
	for i := range 25 {
		lines = append(lines, fmt.Sprintf(`{"id":"evt_%d"}`, i))
	}
	cli(t, strings.Join(lines, "\n"), "send", "--queue", dlq).mustOK(t)
	r := cli(t, "", "redrive", "--from", dlq, "--to", q.Name).mustOK(t)
	if !strings.Contains(r.stdout, "moved 25 messages") || !strings.Contains(r.stdout, "retention period starts again") {
		t.Fatalf("redrive: stdout %s stderr %s", r.stdout, r.stderr)
	}
	keys := map[string]bool{}
	for _, m := range receiveAll(t, q.URL, 25) {
		keys[aws.ToString(m.MessageAttributes["event_id"].StringValue)] = true
	}
	if len(keys) != 25 || !keys["evt_0"] || !keys["evt_24"] {
		t.Fatalf("redriven keys = %v, want evt_0..evt_24", keys)
	}
	r = cli(t, "", "stats", "--no-db", "--queue", q.Name).mustOK(t)
	if !strings.Contains(r.stdout, dlq+" (DLQ)") {
		t.Fatalf("stats does not show the DLQ:\n%s", r.stdout)
	}
}

func randSuffix() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff) }

// TestRedriveKnowsTheInbox (the SQS server and PostgreSQL): redrive --handler sorts a DLQ
// against the handler's inbox rows. A dry run counts and samples each class and changes nothing;
// the run moves the never-applied message back, deletes the applied one and leaves the keyless
// one in the DLQ, saying why.
func TestRedriveKnowsTheInbox(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rd")
	schema := dbArgs[len(dbArgs)-1]
	// evt_done was applied by warehouse; evt_other only by loyalty, so warehouse never applied it.
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id)
		VALUES ('warehouse', 'evt_done'), ('loyalty', 'evt_other')`); err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdinbox", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	cli(t, `{"id":"evt_done"}`+"\n"+`{"id":"evt_other"}`+"\n"+`{"no_id":1}`, "send", "--queue", dlq, "--allow-no-key").mustOK(t)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", dlq, "--to", q.Name, "--handler", "warehouse"}, extra...), dbArgs...)...)
	}
	r := redrive("--dry-run").mustOK(t)
	for _, want := range []string{"dry run: nothing changed", "never applied: 1 (would be moved to " + q.Name + ") [evt_other]",
		"already applied: 1 (would be deleted from the DLQ) [evt_done]", "left in the DLQ: 1", `1: no valid key: inbox: invalid event key from message attribute "event_id"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, r.stdout)
		}
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 3, 30*time.Second) // all still there, visible again
	if n, err := sqstest.Count(t.Context(), srv.Client(), q.URL); err != nil || n != 0 {
		t.Fatalf("the queue holds %d after a dry run (%v); want 0", n, err)
	}

	r = redrive().mustOK(t)
	if !strings.Contains(r.stdout, "never applied: 1 (were moved to") || !strings.Contains(r.stdout, "moved 1 message from "+dlq) {
		t.Errorf("redrive --handler:\n%s", r.stdout)
	}
	ms := receiveAll(t, q.URL, 1)
	if key := aws.ToString(ms[0].MessageAttributes["event_id"].StringValue); key != "evt_other" {
		t.Errorf("moved back %q; want evt_other", key)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 30*time.Second) // the keyless one
	redrive("--dry-run", "--mode", "move-task").mustFail(t, 2, "needs --mode copy")
	cli(t, "", "redrive", "--from", dlq, "--to", q.Name, "--dry-run").mustFail(t, 2, "--dry-run, --keep-applied, --key, --allow-old, --type-*, --payload-* and --inbox-retention need --handler or --route")
	redrive("--key", "message-id").mustFail(t, 2, "a moved copy gets a new one")
}

// TestRedriveWithTheHandlersKey (the pass's SQS server, PostgreSQL): a handler keyed by the JSON
// field order_id is classified by that key with --key json:order_id (and by the default key, the
// body's id, without it); a list of keys is tried in order.
func TestRedriveWithTheHandlersKey(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdkey")
	schema := dbArgs[len(dbArgs)-1]
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ('billing', 'o-1')`); err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdkey", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	cli(t, `{"id":"evt_1","order_id":"o-1"}`+"\n"+`{"id":"evt_2","order_id":"o-2"}`, "send", "--queue", dlq).mustOK(t)
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	redrive := func(extra ...string) result {
		return cli(t, "", append(append([]string{"redrive", "--from", dlq, "--to", q.Name, "--handler", "billing", "--dry-run"}, extra...), dbArgs...)...)
	}
	for _, tc := range []struct{ key, never, applied string }{
		{"json:order_id", "never applied: 1 (would be moved to " + q.Name + ") [o-2]", "already applied: 1 (would be deleted from the DLQ) [o-1]"},
		{"attribute:order,json:order_id", "never applied: 1", "already applied: 1 (would be deleted from the DLQ) [o-1]"},
		{"default", "never applied: 2", "already applied: 0"},
	} {
		r := redrive("--key", tc.key).mustOK(t)
		if !strings.Contains(r.stdout, tc.never) || !strings.Contains(r.stdout, tc.applied) {
			t.Errorf("--key %s:\n%s\nwant %q and %q", tc.key, r.stdout, tc.never, tc.applied)
		}
		sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)
	}
}

// TestRedriveLeavesWhatTheQueueWouldRefuse (the pass's SQS server, PostgreSQL): a DLQ message
// larger than the destination's MaximumMessageSize (1,024 bytes here) is left in the DLQ and
// reported with the reason, never sent blindly; the others are moved.
func TestRedriveLeavesWhatTheQueueWouldRefuse(t *testing.T) {
	t.Parallel()
	_, dbArgs := migratedSchema(t, "cli_rdbig")
	src := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdbig", MaxReceiveCount: 3})
	out, err := srv.Client().CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(src.Name + "-small"),
		Attributes: map[string]string{"MaximumMessageSize": "1024", "VisibilityTimeout": "30", "MessageRetentionPeriod": "345600", "DelaySeconds": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	small := aws.ToString(out.QueueUrl)
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 2000) + `"}`
	dlq := lastPart(src.DLQURL)
	cli(t, big+"\n"+`{"id":"evt_small"}`, "send", "--queue", dlq).mustOK(t)
	sqstest.WaitCount(t, srv.Client(), src.DLQURL, 2, 30*time.Second)
	r := cli(t, "", append([]string{"redrive", "--from", dlq, "--to", lastPart(small), "--handler", "warehouse"}, dbArgs...)...).mustOK(t)
	for _, want := range []string{"never applied: 1", "left in the DLQ: 1", "over " + lastPart(small) + "'s MaximumMessageSize of 1024"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive lacks %q:\n%s", want, r.stdout)
		}
	}
	ms := receiveAll(t, small, 1)
	if !strings.Contains(aws.ToString(ms[0].Body), "evt_small") {
		t.Errorf("moved %q; want evt_small", aws.ToString(ms[0].Body))
	}
	sqstest.WaitCount(t, srv.Client(), src.DLQURL, 1, 30*time.Second)
}

// TestRedriveFIFO (servers with FIFO queues, PostgreSQL): a FIFO DLQ's messages, three groups of
// four, one of them already applied, are moved back with their group ids, in their order within
// each group. Each was sent to the source queue moments before with the same deduplication id,
// as a message dead-lettered within SQS's 5-minute deduplication window was: a copy keeping that
// id would be dropped by SQS and then deleted from the DLQ, lost; every never-applied one arrives.
func TestRedriveFIFO(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.FIFO)
	pool, dbArgs := migratedSchema(t, "cli_rdfifo")
	schema := dbArgs[len(dbArgs)-1]
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ('warehouse', 'g1-2')`); err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdfifo", FIFO: true, MaxReceiveCount: 3})
	var msgs []sqstest.Message
	for i := range 4 {
		for g := range 3 {
			id := fmt.Sprintf("g%d-%d", g, i)
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":%q}`, id), GroupID: fmt.Sprint("g", g), DedupID: "d-" + id})
		}
	}
	for _, url := range []string{q.URL, q.DLQURL} {
		if err := sqstest.Send(t.Context(), srv.Client(), url, msgs); err != nil {
			t.Fatal(err)
		}
	}
	// The originals in the source queue are consumed, as a worker would before they failed.
	receiveAndDelete(t, q.URL, len(msgs))
	r := cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name, "--handler", "warehouse"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "never applied: 11") || !strings.Contains(r.stdout, "already applied: 1") {
		t.Fatalf("redrive:\n%s", r.stdout)
	}
	got := map[string][]string{}
	for _, m := range receiveAndDelete(t, q.URL, 11) {
		g := m.Attributes["MessageGroupId"]
		got[g] = append(got[g], aws.ToString(m.Body))
	}
	for g := range 3 {
		var want []string
		for i := range 4 {
			if id := fmt.Sprintf("g%d-%d", g, i); id != "g1-2" {
				want = append(want, fmt.Sprintf(`{"id":%q}`, id))
			}
		}
		if fmt.Sprint(got[fmt.Sprint("g", g)]) != fmt.Sprint(want) {
			t.Errorf("group g%d arrived as %v; want %v", g, got[fmt.Sprint("g", g)], want)
		}
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 0, 30*time.Second)
}

// receiveAndDelete receives n messages from the queue at url, deleting each as it comes (so a
// FIFO group's next one is released), and fails unless exactly n come within a minute.
func receiveAndDelete(t *testing.T, url string, n int) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(time.Minute)
	for len(got) < n && time.Now().Before(deadline) {
		out, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := srv.Client().DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("received %d messages from %s; want %d", len(got), lastPart(url), n)
	}
	return got
}

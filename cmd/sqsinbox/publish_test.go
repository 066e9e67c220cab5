package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The send --topic-arn tests publish to SNS and read what each subscribed queue received. Raw
// delivery is tested on both servers; SNS envelopes, FIFO topics and filter policies on fauxqs
// only (GoAws's envelopes are malformed: see sqstest.Server.SNSSupported).

// TestSendToTopic (GoAws and fauxqs): every line is published --repeat times with its event_id
// attribute; a raw subscription gets it as an SQS attribute, an enveloped one (fauxqs only) in
// the envelope. Twelve lines make two batches: on GoAws, which refuses a batch of ten, send says
// so once and publishes nine at a time.
func TestSendToTopic(t *testing.T) {
	t.Parallel()
	envelopes, _ := srv.SNSSupported()
	topic := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "cli-topic"})
	raw := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-topic-raw"})
	srv.Subscribe(t, topic, raw, sqstest.SubscribeOptions{Raw: true})
	var env *sqstest.Queue
	if envelopes {
		env = srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-topic-env"})
		srv.Subscribe(t, topic, env, sqstest.SubscribeOptions{})
	}
	var in strings.Builder
	var want []string
	for i := range 6 {
		id := fmt.Sprintf("evt_%d", i)
		fmt.Fprintf(&in, `{"id":%q,"order_id":"o-%d"}`+"\n", id, i)
		want = append(want, id, id)
	}
	r := cli(t, in.String(), "send", "--topic-arn", topic.ARN, "--repeat", "2").mustOK(t)
	if want := "published 12 messages (6 lines × 2) to " + topic.Name; !strings.Contains(r.stdout, want) {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	refusals := strings.Count(r.stderr, "the server refused a batch of 10")
	if srv.GoAws != (refusals == 1) || refusals > 1 {
		t.Errorf("stderr says %d times that a batch of 10 was refused (GoAws: %v):\n%s", refusals, srv.GoAws, r.stderr)
	}
	var got []string
	for _, m := range receiveAll(t, raw.URL, 12) {
		key := aws.ToString(m.MessageAttributes["event_id"].StringValue)
		if !strings.Contains(aws.ToString(m.Body), `"id":"`+key+`"`) {
			t.Errorf("raw: body %s with event_id %q", aws.ToString(m.Body), key)
		}
		got = append(got, key)
	}
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Errorf("raw subscription: event_ids %v, want %v", got, want)
	}
	if env == nil {
		return
	}
	got = nil
	for _, m := range receiveAll(t, env.URL, 12) {
		var e struct {
			Type, TopicArn, Message string
			MessageAttributes       map[string]struct{ Type, Value string }
		}
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &e); err != nil || e.Type != "Notification" || e.TopicArn != topic.ARN {
			t.Fatalf("enveloped subscription: body %s (%v)", aws.ToString(m.Body), err)
		}
		a := e.MessageAttributes["event_id"]
		if a.Type != "String" || !strings.Contains(e.Message, `"id":"`+a.Value+`"`) {
			t.Errorf("enveloped: Message %s with event_id %+v", e.Message, a)
		}
		got = append(got, a.Value)
	}
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Errorf("enveloped subscription: event_ids %v, want %v", got, want)
	}
}

// TestSendToFIFOTopic (fauxqs): a FIFO topic needs --group-id, and with --dedup-id key the
// --repeat copies are dropped as duplicates.
func TestSendToFIFOTopic(t *testing.T) {
	srv.SkipWithoutSNS(t)
	t.Parallel()
	topic := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "cli-topic", FIFO: true})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-topic-fifo", FIFO: true})
	srv.Subscribe(t, topic, q, sqstest.SubscribeOptions{Raw: true})
	in := `{"id":"evt_1","order_id":"o-1"}` + "\n" + `{"id":"evt_2","order_id":"o-2"}`
	cli(t, in, "send", "--topic-arn", topic.ARN).mustFail(t, 2, topic.Name+" is a FIFO topic: pass --group-id")
	r := cli(t, in, "send", "--topic-arn", topic.ARN, "--group-id", "field:order_id", "--dedup-id", "key", "--repeat", "3").mustOK(t)
	if !strings.Contains(r.stdout, "published 6 messages (2 lines × 3)") {
		t.Fatalf("stdout %q", r.stdout)
	}
	var got []string
	for _, m := range receiveWithGroups(t, q.URL, 2) {
		got = append(got, aws.ToString(m.MessageAttributes["event_id"].StringValue)+"/"+m.Attributes["MessageGroupId"])
	}
	if slices.Sort(got); !slices.Equal(got, []string{"evt_1/o-1", "evt_2/o-2"}) {
		t.Errorf("the queue got %v, want evt_1/o-1 and evt_2/o-2 once each", got)
	}
	if n := queueDepth(t, q.URL); n != "0" {
		t.Errorf("%s more messages in the queue: the copies were not deduplicated", n)
	}
}

// TestSendToTopicWithoutPublishBatch (GoAws and fauxqs, behind a proxy that answers PublishBatch
// as an older server does, with InvalidAction): send says so once and publishes one message at a
// time.
func TestSendToTopicWithoutPublishBatch(t *testing.T) {
	topic := srv.CreateTopic(t, sqstest.TopicOptions{Prefix: "cli-topic-single"})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-topic-single"})
	srv.Subscribe(t, topic, q, sqstest.SubscribeOptions{Raw: true})
	p := snsProxy(t, srv.Endpoint, "PublishBatch")
	t.Setenv("AWS_ENDPOINT_URL_SNS", p.URL)
	var in strings.Builder
	for i := range 12 {
		in.WriteString(`{"id":"evt_` + string(rune('a'+i)) + `"}` + "\n")
	}
	r := cli(t, in.String(), "send", "--topic-arn", topic.ARN).mustOK(t)
	if !strings.Contains(r.stdout, "published 12 messages (12 lines × 1)") {
		t.Fatalf("stdout %q", r.stdout)
	}
	if n := strings.Count(r.stderr, "the server has no PublishBatch (InvalidAction"); n != 1 {
		t.Errorf("stderr says %d times that PublishBatch is missing, want once:\n%s", n, r.stderr)
	}
	if p.count("PublishBatch") != 1 || p.count("Publish") != 12 {
		t.Errorf("%d PublishBatch and %d Publish calls, want 1 and 12", p.count("PublishBatch"), p.count("Publish"))
	}
	receiveAll(t, q.URL, 12)
}

func TestSendToTopicRefusals(t *testing.T) {
	t.Parallel()
	missing := "arn:aws:sns:us-east-1:000000000000:no-such-topic-" + randSuffix()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"queue and topic", []string{"--queue", "q", "--topic-arn", missing}, 2, "--queue and --topic-arn exclude each other"},
		{"not an ARN", []string{"--topic-arn", "orders"}, 2, `--topic-arn "orders" is not an SNS topic ARN`},
		{"an SQS ARN", []string{"--topic-arn", "arn:aws:sqs:us-east-1:000000000000:orders"}, 2, "is not an SNS topic ARN"},
		{"over 1 MiB", []string{"--topic-arn", missing, "--max-bytes", "1048577"}, 2, "want 1 to 1048576 (1 MiB, the largest SQS and SNS accept)"},
		{"dedup on a standard topic", []string{"--topic-arn", missing, "--dedup-id", "key"}, 2, "--dedup-id is for FIFO queues and topics"},
	}
	if ok, _ := srv.SNSSupported(); ok {
		cases = append(cases, struct {
			name string
			args []string
			code int
			want string
		}{"missing topic", []string{"--topic-arn", missing}, 1, "publish to " + topicName(missing) + ": NotFound"})
	}
	for _, tc := range cases {
		r := cli(t, `{"id":"evt_1"}`, append([]string{"send"}, tc.args...)...)
		if line := lastLine(r.stderr); r.code != tc.code || !strings.Contains(line, tc.want) {
			t.Errorf("%s: exit %d, %q; want %d and %q", tc.name, r.code, line, tc.code, tc.want)
		}
	}
}

// receiveWithGroups is receiveAll with the messages' system attributes (MessageGroupId), failing
// the test if n messages do not arrive within 10 s.
func receiveWithGroups(t *testing.T, url string, n int) []types.Message {
	t.Helper()
	var out []types.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		r, err := srv.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Messages...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages in %s after 10 s", len(out), n, url)
		}
	}
	return out
}

// actionProxy forwards SNS requests (form-encoded, with an Action) to a real server, counts them
// by action, and answers the refused action as a server that lacks it.
type actionProxy struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func snsProxy(t *testing.T, target, refuse string) *actionProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &actionProxy{calls: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		form, _ := url.ParseQuery(string(body))
		action := form.Get("Action")
		p.mu.Lock()
		p.calls[action]++
		p.mu.Unlock()
		if action == refuse {
			w.Header().Set("Content-Type", "text/xml")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code><Message>Unknown action: `+action+`</Message></Error><RequestId>1</RequestId></ErrorResponse>`)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *actionProxy) count(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[action]
}

// TestRetryFailed: a batch call is repeated with only the entries it listed as failed, and after
// five calls that still list failures the error names the first one.
func TestRetryFailed(t *testing.T) {
	t.Parallel()
	var calls [][]string
	failing := map[string]int{"b": 2, "c": 9} // how many more calls list each as failed
	send := func(batch []string) ([]batchFailure, error) {
		calls = append(calls, slices.Clone(batch))
		var failed []batchFailure
		for _, e := range batch {
			if failing[e] > 0 {
				failing[e]--
				failed = append(failed, batchFailure{e, "Throttled", "slow down " + e})
			}
		}
		return failed, nil
	}
	err := retryFailed(t.Context(), "send to q", []string{"a", "b", "c"}, func(s string) string { return s }, send)
	want := [][]string{{"a", "b", "c"}, {"b", "c"}, {"b", "c"}, {"c"}, {"c"}}
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	if err == nil || err.Error() != "send to q: 1 message failed 5 times, e.g. Throttled: slow down c" {
		t.Errorf("error %v", err)
	}
}

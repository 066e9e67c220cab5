package main

import (
	"bytes"
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

func TestSendRefusesALineOverTheLimit(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-big"})
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 300*1024) + `"}`
	fits := `{"id":"evt_fits","pad":"` + strings.Repeat("x", 256*1024-40) + `"}` // the attribute tips it over
	cases := []struct {
		name, in string
		args     []string
		want     string
	}{
		{"over 256 KiB", `{"id":"evt_1"}` + "\n" + big + "\n",
			nil, fmt.Sprintf("stdin line 2: %d bytes, over the 262144-byte (256 KiB) message limit (the queue's MaximumMessageSize)", len(big))},
		{"over with CRLF endings", `{"id":"evt_1"}` + "\r\n" + big + "\r\n",
			nil, fmt.Sprintf("stdin line 2: %d bytes, over", len(big))},
		{"over with the attribute", fits, nil, "stdin line 1: 262152 bytes with its event_id attribute, over the 262144-byte (256 KiB) message limit"},
		{"over a lower limit", `{"id":"evt_1","pad":"xxxxxxxxxxxxxxxx"}`, []string{"--max-bytes", "20"}, "stdin line 1: 39 bytes, over the 20-byte message limit (--max-bytes)"},
		{"over 1 MiB", "{}", []string{"--max-bytes", "1048577"}, "--max-bytes 1048577: want 1 to 1048576"},
		{"over the queue's limit", "{}", []string{"--max-bytes", "262145"},
			"--max-bytes 262145 is over the queue's MaximumMessageSize, 262144-byte (256 KiB): the queue " + q.Name + " would refuse such a message"},
	}
	for _, tc := range cases {
		r := cli(t, tc.in, append([]string{"send", "--queue", q.URL}, tc.args...)...)
		if line := lastLine(r.stderr); r.code == 0 || !strings.Contains(line, tc.want) || strings.Contains(line, "bufio") {
			t.Errorf("%s: exit %d, %q; want %q", tc.name, r.code, line, tc.want)
		}
	}
	if n := queueDepth(t, q.URL); n != "0" {
		t.Fatalf("queue holds %s messages after refused sends, want 0", n)
	}
	// A line that fits is sent, also with CRLF endings.
	r := cli(t, `{"id":"evt_crlf"}`+"\r\n", "send", "--queue", q.URL).mustOK(t)
	if !strings.Contains(r.stdout, "sent 1 message (1 line × 1)") {
		t.Fatalf("send: %s", r.stdout)
	}
	if m := receiveAll(t, q.URL, 1)[0]; aws.ToString(m.Body) != `{"id":"evt_crlf"}` {
		t.Fatalf("body %q kept its line ending", aws.ToString(m.Body))
	}
}

func queueDepth(t *testing.T, url string) string {
	t.Helper()
	attrs, err := srv.Client().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	return attrs.Attributes["ApproximateNumberOfMessages"]
}

func TestReadLines(t *testing.T) {
	t.Parallel()
	type got struct {
		line    int
		text    string
		tooLong bool
		n       int
	}
	long := strings.Repeat("y", 200*1024) // longer than bufio's 64 KiB buffer
	cases := []struct {
		in   string
		want []got
	}{
		{"a\nbb\r\n\nccc", []got{{1, "a", false, 1}, {2, "bb", false, 2}, {3, "", false, 0}, {4, "ccc", false, 3}}},
		{"12345\n123456\n", []got{{1, "12345", false, 5}, {2, "", true, 6}}},
		{"x\n" + long + "\r\nz\n", []got{{1, "x", false, 1}, {2, "", true, len(long) + 1}, {3, "z", false, 1}}},
		{"", nil},
	}
	for _, tc := range cases {
		var lines []got
		err := readLines(strings.NewReader(tc.in), 5, func(line int, b []byte, n int) error {
			lines = append(lines, got{line, string(b), b == nil, n})
			return nil
		})
		if err != nil || !slices.Equal(lines, tc.want) {
			t.Errorf("readLines(%.20q) = %v, %v; want %v", tc.in, lines, err, tc.want)
		}
	}
}

func TestFitBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sizes []int
		want  int
	}{
		{[]int{10, 10, 10}, 3},
		{[]int{60, 40, 1}, 2},
		{[]int{100, 1}, 1},
		{[]int{101}, 1}, // never none: a refused message was caught earlier
	} {
		if got := fitBatch(tc.sizes, 100); got != tc.want {
			t.Errorf("fitBatch(%v, 100) = %d, want %d", tc.sizes, got, tc.want)
		}
	}
}

func TestSendFIFOIDs(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-fifo", FIFO: true})
	std := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-nofifo"})
	in := `{"id":"evt_1","order_id":"o-1"}` + "\n" + `{"id":"evt_2","order_id":"o-2"}`
	refused := []struct {
		name, in string
		args     []string
		code     int
		want     string
	}{
		{"no group", in, []string{"--queue", q.Name}, 2, q.Name + " is a FIFO queue: pass --group-id"},
		{"dedup on a standard queue", in, []string{"--queue", std.Name, "--dedup-id", "key"}, 2, "--dedup-id is for FIFO queues"},
		{"a space", in, []string{"--queue", q.Name, "--group-id", "a b"}, 2, `--group-id: MessageGroupId "a b" has ' ' at byte 1: SQS allows 1 to 128 ASCII letters, digits and punctuation`},
		{"too long", in, []string{"--queue", q.Name, "--group-id", strings.Repeat("g", 129)}, 2, "MessageGroupId of 129 characters"},
		{"a key with a space", `{"id":"evt 1"}`, []string{"--queue", q.Name, "--group-id", "g", "--dedup-id", "key"}, 1,
			`stdin line 1: --dedup-id: MessageDeduplicationId "evt 1" has ' ' at byte 3`},
		{"a missing field", in, []string{"--queue", q.Name, "--group-id", "field:customer"}, 1,
			`stdin line 1: --group-id field:customer: inbox: invalid event key from JSON field "customer": missing`},
		{"one literal dedup id for two lines", in, []string{"--queue", q.Name, "--group-id", "g", "--dedup-id", "same"}, 2,
			`--dedup-id "same" gives all 2 lines one deduplication id`},
		{"an empty field name", in, []string{"--queue", q.Name, "--group-id", "field:"}, 2, "--group-id field: needs a field name"},
	}
	for _, tc := range refused {
		r := cli(t, tc.in, append([]string{"send"}, tc.args...)...)
		if line := lastLine(r.stderr); r.code != tc.code || !strings.Contains(line, tc.want) {
			t.Errorf("%s: exit %d, %q; want %d and %q", tc.name, r.code, line, tc.code, tc.want)
		}
	}
}

// TestSendFIFOIDsReachTheServer sends through a recording proxy in front of the real server:
// GoAws does not return a message's MessageGroupId or MessageDeduplicationId, so the request
// is where they are checked.
func TestSendFIFOIDsReachTheServer(t *testing.T) {
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-fifo-ids", FIFO: true})
	proxy := recordingProxy(t, srv.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL_SQS", proxy.URL)
	in := `{"id":"evt_1","order_id":"o-1"}` + "\n" + `{"id":"evt_2","order_id":"o-2"}`
	r := cli(t, in, "send", "--queue", q.Name, "--group-id", "field:order_id", "--dedup-id", "key").mustOK(t)
	if !strings.Contains(r.stdout, "sent 2 messages (2 lines × 1)") {
		t.Fatalf("send: %s", r.stdout)
	}
	var sent []string
	for _, body := range proxy.bodies("AmazonSQS.SendMessageBatch") {
		var req struct {
			Entries []struct{ MessageBody, MessageGroupId, MessageDeduplicationId string }
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		for _, e := range req.Entries {
			sent = append(sent, e.MessageGroupId+"/"+e.MessageDeduplicationId)
		}
	}
	if want := []string{"o-1/evt_1", "o-2/evt_2"}; !slices.Equal(sent, want) {
		t.Fatalf("sent group/dedup ids %v, want %v", sent, want)
	}
}

// proxy forwards every request to a real server and keeps the request bodies.
type proxy struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][][]byte // X-Amz-Target -> bodies
}

func recordingProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{seen: map[string][][]byte{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.seen[r.Header.Get("X-Amz-Target")] = append(p.seen[r.Header.Get("X-Amz-Target")], body)
		p.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) bodies(target string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[target]
}

// TestSendLimitFollowsTheQueue (GoAws or fauxqs): the message limit is the queue's
// MaximumMessageSize, read before anything is sent: a queue that takes at most 2 KiB refuses a
// 3,000-byte line (nothing sent) and a --max-bytes above it, and takes a line under it.
func TestSendLimitFollowsTheQueue(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-2k"})
	// Both attributes: GoAws resets the other one to 0 when given one (TESTING.md).
	if _, err := srv.Client().SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.URL),
		Attributes: map[string]string{"MaximumMessageSize": "2048", "VisibilityTimeout": "30"}}); err != nil {
		t.Fatal(err)
	}
	line := `{"id":"evt_1","pad":"` + strings.Repeat("x", 3000) + `"}`
	r := cli(t, line, "send", "--queue", q.URL)
	if want := "over the 2048-byte (2 KiB) message limit (the queue's MaximumMessageSize)"; r.code == 0 || !strings.Contains(lastLine(r.stderr), want) {
		t.Errorf("a 3,000-byte line: exit %d, %q; want %q", r.code, lastLine(r.stderr), want)
	}
	r = cli(t, `{"id":"evt_2"}`, "send", "--queue", q.URL, "--max-bytes", "4096")
	if want := "--max-bytes 4096 is over the queue's MaximumMessageSize, 2048-byte (2 KiB)"; r.code != 2 || !strings.Contains(lastLine(r.stderr), want) {
		t.Errorf("--max-bytes over the queue's: exit %d, %q; want 2 and %q", r.code, lastLine(r.stderr), want)
	}
	if n := queueDepth(t, q.URL); n != "0" {
		t.Fatalf("queue holds %s messages after refused sends, want 0", n)
	}
	cli(t, `{"id":"evt_3","pad":"`+strings.Repeat("x", 1500)+`"}`, "send", "--queue", q.URL).mustOK(t)
	receiveAll(t, q.URL, 1)
}

// TestSendChecksEveryLineFirst (the pass's SQS server behind a recording proxy): a line holding
// a character SQS refuses in a body is found before anything is sent, as a line too long is:
// with ten good lines before it, a bad line 11 (a control character or bytes that are not UTF-8
// in a --raw line; a U+FFFE inside a JSON string, which is valid JSON) stops the send with an
// error naming the line and the byte, and no SendMessageBatch request leaves. An --attr value
// with such a character is refused as a usage error.
func TestSendChecksEveryLineFirst(t *testing.T) {
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rawcheck"})
	proxy := recordingProxy(t, srv.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL_SQS", proxy.URL)
	var good []string
	for i := range 10 {
		good = append(good, fmt.Sprintf("poison %d", i))
	}
	for _, tc := range []struct {
		name, line string
		args       []string
		want       string
	}{
		{"a control character", "poison \x01 10", []string{"--raw"}, "stdin line 11: the line holds the character U+0001 at byte 7, which SQS refuses"},
		{"not UTF-8", "poison \xff 10", []string{"--raw"}, "stdin line 11: the line is not valid UTF-8"},
		{"U+FFFE in JSON", `{"id":"evt_11","note":"` + "\uFFFE" + `"}`, []string{"--raw"}, "stdin line 11: the line holds the character U+FFFE at byte 23"},
	} {
		in := strings.Join(append(slices.Clone(good), tc.line), "\n")
		r := cli(t, in, append([]string{"send", "--queue", q.Name}, tc.args...)...)
		if r.code == 0 || !strings.Contains(lastLine(r.stderr), tc.want) {
			t.Errorf("%s: exit %d, %q; want a failure with %q", tc.name, r.code, lastLine(r.stderr), tc.want)
		}
	}
	cli(t, "x", "send", "--queue", q.Name, "--raw", "--attr", "type=Order\x00Paid").mustFail(t, 2, `--attr "type=Order\x00Paid": the value holds the character U+0000 at byte 5`)
	if n := len(proxy.bodies("AmazonSQS.SendMessageBatch")); n != 0 {
		t.Errorf("%d SendMessageBatch requests left before the bad line was found; want none", n)
	}
	if n := queueDepth(t, q.URL); n != "0" {
		t.Errorf("the queue holds %s messages; want 0", n)
	}
}

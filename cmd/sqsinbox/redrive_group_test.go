package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// fairProxy stands between the CLI and the pass's SQS server and gives standard queues the one
// thing of SQS's fair queues that GoAws and fauxqs lack: a message sent with a MessageGroupId
// comes back with it. It keeps each sent message's group by its MessageId and adds it to the
// ReceiveMessage answers, and it keeps every SendMessage request, to check what a copy carried.
type fairProxy struct {
	*httptest.Server
	mu     sync.Mutex
	groups map[string]string // MessageId -> MessageGroupId
	sends  []sentMessage
}

// sentMessage is what one SendMessage request carried.
type sentMessage struct {
	QueueUrl, MessageBody, MessageGroupId string //nolint:revive // the request's JSON names
}

func startFairProxy(t *testing.T) *fairProxy {
	t.Helper()
	p := &fairProxy{groups: map[string]string{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, srv.Endpoint+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header, out.Host = r.Header.Clone(), r.Host
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if resp.StatusCode == http.StatusOK {
			answer = p.observe(r.Header.Get("X-Amz-Target"), body, answer)
		}
		for k, vs := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = vs
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(p.Close)
	return p
}

// observe keeps a SendMessage's request and its message's group, and adds the groups to a
// ReceiveMessage's answer; it returns the answer to give the client.
func (p *fairProxy) observe(target string, req, answer []byte) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch target {
	case "AmazonSQS.SendMessage":
		var in sentMessage
		var out struct{ MessageId string } //nolint:revive // the answer's JSON name
		if json.Unmarshal(req, &in) != nil || json.Unmarshal(answer, &out) != nil {
			return answer
		}
		p.sends = append(p.sends, in)
		if in.MessageGroupId != "" {
			p.groups[out.MessageId] = in.MessageGroupId
		}
	case "AmazonSQS.ReceiveMessage":
		var out map[string]any
		if json.Unmarshal(answer, &out) != nil {
			return answer
		}
		msgs, _ := out["Messages"].([]any)
		for _, m := range msgs {
			msg, _ := m.(map[string]any)
			id, _ := msg["MessageId"].(string)
			g, ok := p.groups[id]
			if !ok {
				continue
			}
			attrs, _ := msg["Attributes"].(map[string]any)
			if attrs == nil {
				attrs = map[string]any{}
			}
			attrs["MessageGroupId"] = g
			msg["Attributes"] = attrs
		}
		if b, err := json.Marshal(out); err == nil {
			return b
		}
	}
	return answer
}

// groupsSent returns the MessageGroupId of each message sent to queueURL, by body ("" for none).
func (p *fairProxy) groupsSent(queueURL string) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := map[string]string{}
	for _, s := range p.sends {
		if s.QueueUrl == queueURL {
			got[s.MessageBody] = s.MessageGroupId
		}
	}
	return got
}

// TestRedriveKeepsTheTenant (the pass's SQS server behind fairProxy, which returns a standard
// queue's MessageGroupId as SQS's fair queues do; PostgreSQL): every path that copies a
// dead-lettered message back sends the copy with the original's MessageGroupId on a standard
// queue, its fair-queue tenant: the plain redrive, the classified one (--handler), and the
// console's. A message without one is copied without one.
func TestRedriveKeepsTheTenant(t *testing.T) {
	p := startFairProxy(t)
	t.Setenv("AWS_ENDPOINT_URL_SQS", p.URL)
	c := sqs.New(srv.Client().Options(), func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL) })
	pool, dbArgs := migratedSchema(t, "cli_rdtenant")
	processEvent(t, pool, dbArgs[len(dbArgs)-1], "warehouse", "evt_t_done")
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdtenant", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	// fill dead-letters one message per id, each of the tenant it maps to ("" for none).
	fill := func(tenants map[string]string) {
		t.Helper()
		for id, g := range tenants {
			in := &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(fmt.Sprintf(`{"id":%q}`, id))}
			if g != "" {
				in.MessageGroupId = aws.String(g)
			}
			if _, err := c.SendMessage(t.Context(), in); err != nil {
				t.Fatal(err)
			}
		}
		sqstest.WaitCount(t, srv.Client(), q.DLQURL, len(tenants), 30*time.Second)
	}
	check := func(path string, want map[string]string) {
		t.Helper()
		got := p.groupsSent(q.URL)
		for id, g := range want {
			body := fmt.Sprintf(`{"id":%q}`, id)
			switch sent, ok := got[body]; {
			case !ok:
				t.Errorf("%s: no copy of %s was sent", path, id)
			case sent != g:
				t.Errorf("%s: the copy of %s was sent with MessageGroupId %q; want %q", path, id, sent, g)
			}
		}
	}

	fill(map[string]string{"evt_t_a": "tenant-a", "evt_t_b": "tenant-b", "evt_t_none": ""})
	cli(t, "", "redrive", "--from", dlq, "--to", q.Name).mustOK(t)
	check("redrive", map[string]string{"evt_t_a": "tenant-a", "evt_t_b": "tenant-b", "evt_t_none": ""})

	fill(map[string]string{"evt_t_c": "tenant-c", "evt_t_done": "tenant-d"})
	r := cli(t, "", append([]string{"redrive", "--from", dlq, "--to", q.Name, "--handler", "warehouse"}, dbArgs...)...).mustOK(t)
	if want := "already applied: 1 (were deleted from the DLQ) [evt_t_done]"; !strings.Contains(r.stdout, want) {
		t.Errorf("redrive --handler lacks %q:\n%s", want, r.stdout)
	}
	check("redrive --handler", map[string]string{"evt_t_c": "tenant-c"})

	fill(map[string]string{"evt_t_e": "tenant-e"})
	tc := startConsole(t, append([]string{"--queue", q.Name, "--token", testToken}, dbArgs...)...)
	session := tc.login()
	form := url.Values{"csrf": {tc.csrf()}, "queue": {q.Name}, "handler": {"warehouse"}, "mode": {"run"}}
	if r := tc.post("/redrive", form, session); r.status != http.StatusOK {
		t.Fatalf("the console's redrive: status %d\n%s", r.status, r.body)
	}
	check("the console's redrive", map[string]string{"evt_t_e": "tenant-e"})
}

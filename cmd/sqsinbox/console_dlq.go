package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// queue is the configured queue of that name; the pages reach no other.
func (c *console) queue(name string) (consoleQueue, bool) {
	for _, q := range c.queues {
		if q.name == name {
			return q, true
		}
	}
	return consoleQueue{}, false
}

// dlqOf is the URL and attributes of q's dead-letter queue, from q's redrive policy.
func (c *console) dlqOf(ctx context.Context, q consoleQueue) (string, map[string]string, error) {
	a, err := attributes(ctx, c.sqs, q.url)
	if err != nil {
		return "", nil, err
	}
	arn := dlqARN(a["RedrivePolicy"])
	if arn == "" {
		return "", nil, fmt.Errorf("queue %s has no redrive policy, so no dead-letter queue", q.name)
	}
	du, err := urlFromARN(ctx, c.sqs, arn)
	if err != nil {
		return "", nil, err
	}
	da, err := attributes(ctx, c.sqs, du)
	return du, da, err
}

type dlqView struct {
	Queue, DLQName, Visible, InFlight string
	Err, PeekErr                      string
	Handler                           string
	Peeked                            bool     // the page answers a peek (a POST); opened with GET, it received nothing
	Handlers                          []string // the inbox's handler names, for the redrive form
	Published                         string   // the routes the queue's worker published, described; "" for none
	Messages                          []peekMessage
}

type peekMessage struct {
	ID, Key, KeyErr, Receives, Sent, Body string
}

// dlqPage is the DLQ page opened with GET: the DLQ's name and counts, the peek button and the
// redrive form. It receives nothing: a GET can come from any page the operator opens (an <img>
// of another site), and a receive raises the messages' receive counts and hides them.
func (c *console) dlqPage(w http.ResponseWriter, r *http.Request) {
	c.dlq(w, r, r.URL.Query().Get("queue"), r.URL.Query().Get("handler"), false)
}

// dlqPeek is the peek button: the DLQ page with up to peekMax messages received, after the
// checks of a POST from the console's own page.
func (c *console) dlqPeek(w http.ResponseWriter, r *http.Request) {
	if !c.allowPeek(w, r) {
		return
	}
	c.dlq(w, r, r.PostFormValue("queue"), r.PostFormValue("handler"), true)
}

// dlq renders the DLQ page of the queue name; it receives from the DLQ only when peek is set.
func (c *console) dlq(w http.ResponseWriter, r *http.Request, name, handler string, peek bool) {
	q, ok := c.queue(name)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such queue", fmt.Sprintf("%q is not one of the queues this console was given (--queue).", name))
		return
	}
	d := c.page(r, "DLQ of "+q.name)
	v := &dlqView{Queue: q.name, Handler: handler, Peeked: peek, Handlers: c.knownHandlers(r.Context()), Published: c.publishedView(r.Context(), q.name)}
	d.DLQ = v
	du, da, err := c.dlqOf(r.Context(), q)
	if err != nil {
		v.Err = err.Error()
		c.render(w, http.StatusOK, "dlq.html", d)
		return
	}
	v.DLQName, v.Visible, v.InFlight = lastPart(du), countAttr(da, "ApproximateNumberOfMessages"), countAttr(da, "ApproximateNumberOfMessagesNotVisible")
	if !peek {
		c.render(w, http.StatusOK, "dlq.html", d)
		return
	}
	if !c.busy.TryRLock() {
		v.PeekErr = "No peek: an action of this console is running. Peek again when it is done."
		c.render(w, http.StatusConflict, "dlq.html", d)
		return
	}
	v.Messages, err = c.peek(r.Context(), du)
	c.busy.RUnlock()
	if err != nil {
		v.PeekErr = err.Error()
	}
	c.render(w, http.StatusOK, "dlq.html", d)
}

// errorList is err's message with the errors it joins (errors.Join puts a newline between them)
// separated by "; ": on a page a newline is a space, and would run them together.
func errorList(err error) string {
	var parts []string
	for l := range strings.Lines(err.Error()) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// peek receives up to peekMax messages of the DLQ and makes them visible again at once; it never
// deletes. A release that fails leaves the message hidden for peekVisibility seconds only.
func (c *console) peek(ctx context.Context, dlqURL string) ([]peekMessage, error) {
	out, err := c.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(dlqURL),
		MaxNumberOfMessages:         int32(c.peekMax),
		WaitTimeSeconds:             1,
		VisibilityTimeout:           peekVisibility,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("peek at %s: %s", lastPart(dlqURL), apiError(err))
	}
	rctx := context.WithoutCancel(ctx)
	var msgs []peekMessage
	for _, m := range out.Messages {
		_, _ = c.sqs.ChangeMessageVisibility(rctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		pm := peekMessage{ID: aws.ToString(m.MessageId), Receives: m.Attributes["ApproximateReceiveCount"]}
		if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
			pm.Sent = time.UnixMilli(ms).UTC().Format(time.RFC3339)
		}
		if key, err := messageKey(m); err != nil {
			pm.KeyErr = "no valid key: " + errorList(err)
		} else {
			pm.Key = key
		}
		if !c.noBodies {
			pm.Body = aws.ToString(m.Body)
			if r := []rune(pm.Body); len(r) > maxBodyShown {
				pm.Body = string(r[:maxBodyShown]) + fmt.Sprintf("… (%d bytes in all)", len(aws.ToString(m.Body)))
			}
		}
		msgs = append(msgs, pm)
	}
	return msgs, nil
}

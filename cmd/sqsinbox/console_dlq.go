package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
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

// takeDLQ takes the console's one action at a time (the caller unlocks c.busy) and finds q's
// DLQ. On failure it answers with title and returns false, holding nothing.
func (c *console) takeDLQ(w http.ResponseWriter, r *http.Request, q consoleQueue, title string) (string, bool) {
	if !c.busy.TryLock() {
		c.fail(w, r, http.StatusConflict, title, "another action or a peek of this console is running; try again when it is done")
		return "", false
	}
	du, _, err := c.dlqOf(c.base, q)
	if err != nil {
		c.busy.Unlock()
		c.fail(w, r, http.StatusBadRequest, title, err.Error())
		return "", false
	}
	return du, true
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
	Failures                              []peekFailure // the handlers' recorded failures, the newest first
}

// peekFailure is a recorded failure as the DLQ page shows it: the error's first line in the
// table, the whole recorded text on request.
type peekFailure struct {
	Handler, When, Receive, Short, Error string
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
// deletes. A release that fails leaves the message hidden for peekVisibility seconds only. Each
// message comes with the failures its handlers recorded in the inbox; failures that cannot be
// read are said, and the messages shown without them.
func (c *console) peek(ctx context.Context, dlqURL string) ([]peekMessage, error) {
	received, err := peekDLQ(ctx, c.sqs, dlqURL, c.peekMax)
	if err != nil {
		return nil, err
	}
	fails, ferr := dlqFailures(ctx, c.ib, received, inboxhandler.DefaultKey)
	var msgs []peekMessage
	for _, m := range received {
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
		pm.Failures = peekFailures(fails[pm.ID])
		msgs = append(msgs, pm)
	}
	if ferr != nil {
		return msgs, fmt.Errorf("the recorded failures could not be read: %s", oneLine(ferr))
	}
	return msgs, nil
}

// peekFailures are failure records as the console's pages show them.
func peekFailures(fs []inbox.Failure) []peekFailure {
	var out []peekFailure
	for _, f := range fs {
		pf := peekFailure{Handler: f.Handler, When: f.FailedAt.UTC().Format(time.RFC3339), Receive: "-", Short: shortError(f.Error), Error: f.Error}
		if f.ReceiveCount > 0 {
			pf.Receive = strconv.Itoa(f.ReceiveCount)
		}
		out = append(out, pf)
	}
	return out
}

// dlqDiscard is `sqsinbox dlq discard` from the DLQ page: the messages ticked in the peek are
// deleted from the DLQ, with the reason given, recorded as discarded by the name given (or
// "console"), refused for an event no handler applied unless "force" is ticked. It needs the
// token, as every action.
func (c *console) dlqDiscard(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, true) {
		return
	}
	q, ok := c.queue(r.PostFormValue("queue"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such queue", fmt.Sprintf("%q is not one of the queues this console was given (--queue).", r.PostFormValue("queue")))
		return
	}
	by := strings.TrimSpace(r.PostFormValue("by"))
	if by == "" {
		by = "console"
	} else {
		by += " (console)"
	}
	o := discardOptions{ids: r.PostForm["message"], by: by, reason: r.PostFormValue("reason"), force: r.PostFormValue("force") != ""}
	if err := o.check(func(string) string { return "" }); err != nil {
		why := strings.TrimPrefix(oneLine(err), errUsage.Error()+": ")
		if len(o.ids) == 0 {
			why = "no message ticked: peek, tick the messages to discard, and give the reason"
		}
		c.fail(w, r, http.StatusBadRequest, "Nothing discarded", why)
		return
	}
	du, ok := c.takeDLQ(w, r, q, "Nothing discarded")
	if !ok {
		return
	}
	defer c.busy.Unlock()
	ctx := c.base
	rep, err := discardMessages(ctx, c.sqs, c.ib, du, o)
	var report strings.Builder
	rep.write(&report, lastPart(du))
	c.logf("discard from %s by %q from %s, reason %q, force %v: %s", lastPart(du), o.by, r.RemoteAddr, o.reason, o.force,
		strings.ReplaceAll(strings.TrimSpace(report.String()), "\n", "; ")+map[bool]string{true: "; failed: " + errText(err), false: ""}[err != nil])
	d := c.page(r, "Discard from "+lastPart(du))
	d.Back = "/dlq?queue=" + url.QueryEscape(q.name)
	d.Result = &resultView{Report: report.String(), Counts: []resultCount{
		{len(rep.discarded), "discarded (deleted from the DLQ, recorded with your reason)"},
		{len(rep.refused), "refused: no handler applied the event (tick force to discard it anyway)"},
		{len(rep.failed) + len(rep.notFound), "not found or failed (the report says why)"},
	}}
	status := http.StatusOK
	if err != nil {
		d.Error = "The discard stopped: " + errText(err)
		status = http.StatusBadGateway
	}
	c.render(w, status, "result.html", d)
}

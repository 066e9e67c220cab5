package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// redrive is `sqsinbox redrive --from DLQ --to QUEUE --handler H [--dry-run] [--keep-applied]
// [--max N]`, or with `--route TYPE=H ... [--type-attribute A] [--type-field F]` in place of
// --handler, in copy mode, through the same classifier and copy loop.
func (c *console) redrive(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, true) {
		return
	}
	q, ok := c.queue(r.PostFormValue("queue"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such queue", fmt.Sprintf("%q is not one of the queues this console was given (--queue).", r.PostFormValue("queue")))
		return
	}
	cc, err := c.redriveConfig(r, q.name)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Redrive not started", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return
	}
	maxN := 0
	if s := strings.TrimSpace(r.PostFormValue("max")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			c.fail(w, r, http.StatusBadRequest, "Redrive not started", fmt.Sprintf("at most %q: want a whole number, 0 or more (empty or 0: every message)", s))
			return
		}
		maxN = n
	}
	du, ok := c.takeDLQ(w, r, q, "Redrive not started")
	if !ok {
		return
	}
	defer c.busy.Unlock()
	ctx := c.base
	cl, err := c.db.newClassifier(ctx, c.ib, cc)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "Redrive not started", oneLine(err))
		return
	}
	var report bytes.Buffer
	err = copyMessages(ctx, env{stdout: &report, stderr: io.Discard}, c.sqs, du, q.url, maxN, 0, cl)
	kind := "redrive"
	if cc.dryRun {
		kind = "redrive preview (dry run)"
	}
	c.logf("%s of %s to %s against %s, from %s: %s%s", kind, lastPart(du), q.name, cl.describe(), r.RemoteAddr, cl.progress(),
		map[bool]string{true: "; failed: " + errText(err), false: ""}[err != nil])

	verb, applied := "moved to "+q.name, "deleted from the DLQ"
	if cc.keepApplied {
		applied = "left in the DLQ (keep applied)"
	}
	if cc.dryRun {
		verb, applied = "would be "+verb, "would be "+applied
	}
	d := c.page(r, "Redrive of "+lastPart(du)+" against "+cl.describe())
	if cc.dryRun {
		d.Title = "Preview: redrive of " + lastPart(du) + " against " + cl.describe() + " (nothing changed)"
	}
	d.Back = "/dlq?queue=" + url.QueryEscape(q.name) + "&handler=" + url.QueryEscape(cc.handler)
	d.Result = &resultView{Report: report.String(), Counts: []resultCount{
		{cl.counts[classMove], "never applied: " + verb},
		{cl.counts[classApplied], "already applied: " + applied},
		{cl.counts[classLeave], "left in the DLQ (the report says why)"},
	}}
	status := http.StatusOK
	if err != nil {
		d.Error = "The redrive stopped: " + errText(err)
		status = http.StatusBadGateway
	}
	c.render(w, status, "result.html", d)
}

// redriveConfig reads the redrive form of queue: one handler (chosen among the inbox's), or
// routes (TYPE=HANDLER, separated by spaces, commas or lines), or neither, for the routes the
// queue's worker published; the type's attribute and body field, when given, override where the
// published routes read the type.
func (c *console) redriveConfig(r *http.Request, queue string) (classifierConfig, error) {
	typeAttr, typeField := cmp.Or(strings.TrimSpace(r.PostFormValue("type_attribute")), "type"), strings.TrimSpace(r.PostFormValue("type_field"))
	cc := classifierConfig{handler: strings.TrimSpace(r.PostFormValue("handler")), retention: c.retention, payloads: c.payloads,
		dryRun: r.PostFormValue("mode") != "run", keepApplied: r.PostFormValue("keep_applied") != "",
		allowOld: r.PostFormValue("allow_old") != "", key: defaultKeySpec, noRoute: "has no route among those given",
		types: inboxhandler.RouterConfig{TypeAttribute: typeAttr, TypeField: typeField}}
	routes := strings.FieldsFunc(r.PostFormValue("routes"), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	switch {
	case cc.handler != "" && len(routes) > 0:
		return cc, errors.New("give a handler (a queue with one handler) or routes (a router's queue), not both")
	case cc.handler != "":
		if err := inbox.ValidateHandler(cc.handler); err != nil {
			return cc, fmt.Errorf("handler: %w", err)
		}
	}
	var err error
	if cc.routes, err = parseRoutes(routes); err != nil {
		return cc, err
	}
	p, err := c.ib.PublishedRoutes(c.base, queue)
	switch {
	case err != nil && (cc.handler != "" || len(routes) > 0):
		c.logf("the routes published for %s could not be read: %s", queue, oneLine(err))
		p = nil
	case err != nil:
		return cc, fmt.Errorf("no handler or routes given, and the routes published for queue %s could not be read: %s", queue, oneLine(err))
	case p == nil && cc.handler == "" && len(routes) == 0:
		return cc, fmt.Errorf("choose the queue's handler, or give routes TYPE=HANDLER for a router's queue: no routes are published for queue %s "+
			"(a worker whose handler is an inboxhandler.Router or Handler publishes them when it starts)", queue)
	}
	return cc, cc.usePublished(p, typeAttr != "type" || typeField != "")
}

// publishedView describes the routes the queue's worker published, for the redrive form; "" when
// none were, or they cannot be read (the form then asks for a handler or routes).
func (c *console) publishedView(ctx context.Context, queue string) string {
	p, err := c.ib.PublishedRoutes(ctx, queue)
	if err != nil {
		c.logf("the routes published for %s: %s", queue, oneLine(err))
		return ""
	}
	if p == nil {
		return ""
	}
	text := strings.ToUpper(publishedText(p)[:1]) + publishedText(p)[1:]
	if p.Handler != "" {
		return fmt.Sprintf("%s. %s.", publishedRoutesText(p.Routes), text)
	}
	return fmt.Sprintf("%s; type read from %s. %s.", routesText(p.Routes.Routes), typeSourceText(inboxhandler.RouterConfig{TypeAttribute: p.TypeAttribute,
		TypeField: p.TypeField}, p.TypeFunc), text)
}

// handlerCache holds the inbox's handler names for a minute: finding them reads the whole table.
type handlerCache struct {
	mu    sync.Mutex
	names []string
	at    time.Time
}

// knownHandlers returns the names of the handlers the inbox has rows of (inbox.Stats), read at
// most once a minute; none when they cannot be read (the form then takes routes only).
func (c *console) knownHandlers(ctx context.Context) []string {
	h := &c.handlers
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names != nil && time.Since(h.at) < time.Minute {
		return h.names
	}
	st, err := c.ib.Stats(ctx)
	if err != nil {
		c.logf("the redrive form's handlers: %s", oneLine(err))
		return nil
	}
	h.names = []string{}
	for _, hs := range st.Handlers {
		h.names = append(h.names, hs.Handler)
	}
	h.at = time.Now()
	return h.names
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err)
}

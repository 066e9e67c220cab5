package main

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// queueRow is one line of the queues table; counts are SQS's approximate ones, as text.
type queueRow struct {
	Name, Err                                        string
	Visible, InFlight, Delayed, Age                  string
	DLQName, DLQErr, DLQVisible, DLQInFlight, DLQAge string
	ageAt, dlqAgeAt                                  int // index into the CloudWatch names, -1: none
}

type lookupView struct {
	Key      string
	Found    []inbox.ProcessedEvent
	Failures []peekFailure // the event's recorded failures, the newest first
	Err      string
}

func (c *console) index(w http.ResponseWriter, r *http.Request) {
	d := c.page(r, "Overview")
	status := http.StatusOK
	q, err := url.ParseQuery(r.URL.RawQuery)
	switch {
	case err != nil:
		d.Lookup = &lookupView{Err: "the address's query is not valid URL encoding: " + err.Error()}
		status = http.StatusBadRequest
	case q.Has("key"):
		key := q.Get("key")
		d.Key = key
		d.Lookup, status = c.lookup(r.Context(), key)
	}
	d.Queues, d.AgeNote = c.queueRows(r.Context())
	d.Outbox = c.outboxView(r.Context())
	c.render(w, status, "index.html", d)
}

// lookup is `sqsinbox events show KEY`: inbox.Lookup, which binds the key as a parameter, so a
// key of any content is only ever data.
func (c *console) lookup(ctx context.Context, key string) (*lookupView, int) {
	v := &lookupView{Key: key}
	if !utf8.ValidString(key) {
		v.Key = strconv.Quote(key)
	}
	if err := inbox.ValidateKey(key); err != nil {
		v.Err = "This key cannot be looked up: " + err.Error() + "."
		return v, http.StatusBadRequest
	}
	found, err := c.ib.Lookup(ctx, key)
	if err != nil {
		v.Err = "lookup: " + c.db.inboxError(err).Error()
		return v, http.StatusInternalServerError
	}
	v.Found = found
	fs, err := c.ib.Failures(ctx, []string{key}, nil)
	if err != nil {
		v.Err = "failures: " + c.db.inboxError(err).Error()
		return v, http.StatusInternalServerError
	}
	v.Failures = peekFailures(fs)
	return v, http.StatusOK
}

// queueRows reads each queue's attributes and its DLQ's, then the oldest ages of all of them
// from CloudWatch in one call, as `sqsinbox stats` does. A failing queue fails its row only.
func (c *console) queueRows(ctx context.Context) ([]queueRow, string) {
	rows := make([]queueRow, 0, len(c.queues))
	var names []string
	for _, q := range c.queues {
		row := queueRow{Name: q.name, ageAt: -1, dlqAgeAt: -1}
		a, err := attributes(ctx, c.sqs, q.url)
		if err != nil {
			row.Err = err.Error()
			rows = append(rows, row)
			continue
		}
		row.Visible, row.InFlight, row.Delayed = countAttr(a, "ApproximateNumberOfMessages"), countAttr(a, "ApproximateNumberOfMessagesNotVisible"), countAttr(a, "ApproximateNumberOfMessagesDelayed")
		row.ageAt, names = len(names), append(names, q.name)
		if arn := dlqARN(a["RedrivePolicy"]); arn != "" {
			du, err := urlFromARN(ctx, c.sqs, arn)
			var da map[string]string
			if err == nil {
				da, err = attributes(ctx, c.sqs, du)
			}
			if err != nil {
				row.DLQErr = "dead-letter queue: " + err.Error()
			} else {
				row.DLQName, row.DLQVisible, row.DLQInFlight = lastPart(du), countAttr(da, "ApproximateNumberOfMessages"), countAttr(da, "ApproximateNumberOfMessagesNotVisible")
				row.dlqAgeAt, names = len(names), append(names, row.DLQName)
			}
		}
		rows = append(rows, row)
	}
	note := ""
	var ages []queueAge
	switch {
	case !c.withAge:
		note = "not asked (--no-age)"
	case len(names) > 0:
		var err error
		if ages, err = oldestAges(ctx, c.awsCfg, names); err != nil {
			ages, note = nil, ageUnavailable(err)
		}
	}
	cell := func(i int) string {
		switch {
		case i < 0:
			return ""
		case ages == nil:
			return "unavailable"
		}
		return ages[i].text()
	}
	for i := range rows {
		rows[i].Age, rows[i].DLQAge = cell(rows[i].ageAt), cell(rows[i].dlqAgeAt)
	}
	return rows, note
}

// countAttr is a count attribute of a queue, or "–" where the server does not give it (GoAws has
// no ApproximateNumberOfMessagesDelayed).
func countAttr(a map[string]string, name string) string {
	if v, ok := a[name]; ok {
		return v
	}
	return "–"
}

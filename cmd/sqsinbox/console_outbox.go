package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

type outboxView struct {
	Missing string
	Err     string
	Backlog int64
	Oldest  string
	Parked  int64
	Rows    []parkedView
}

type parkedView struct {
	ID                                        int64
	EventID, Destination, ParkedAt, LastError string
	Attempts                                  int
}

// outboxView is `sqsinbox stats`'s outbox part: the backlog, its oldest age, and the parked
// messages, the last parked first.
func (c *console) outboxView(ctx context.Context) *outboxView {
	ob, err := openOutbox(ctx, c.pool, c.db.schema)
	if errors.Is(err, errOutboxNotMigrated) {
		return &outboxView{Missing: "The outbox is not migrated in schema " + c.db.schema +
			": nothing to show (a service that uses it runs `sqsinbox migrate up`)."}
	}
	if err != nil {
		return &outboxView{Err: "outbox: " + oneLine(err)}
	}
	st, err := ob.Stats(ctx)
	if err != nil {
		return &outboxView{Err: oneLine(err)}
	}
	v := &outboxView{Backlog: st.Backlog, Parked: st.Parked, Oldest: "none"}
	if st.Backlog > 0 {
		v.Oldest = ageText(st.OldestUnsent)
	}
	if st.Parked == 0 {
		return v
	}
	rows, err := listParked(ctx, c.pool, c.db.schema, parkedShown)
	if err != nil {
		v.Err = oneLine(err)
		return v
	}
	for _, p := range rows {
		v.Rows = append(v.Rows, parkedView{ID: p.id, EventID: p.eventID, Destination: p.destination, Attempts: p.attempts,
			ParkedAt: p.parkedAt.UTC().Format(time.RFC3339), LastError: errorText(p.lastError)})
	}
	return v
}

// retryParked is `sqsinbox outbox retry ID` (one id) or `--all`: outbox.RetryParked.
func (c *console) retryParked(w http.ResponseWriter, r *http.Request) {
	if !c.allowPOST(w, r, true) {
		return
	}
	var ids []int64
	if r.PostFormValue("all") == "" {
		id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
		if err != nil || id < 1 {
			c.fail(w, r, http.StatusBadRequest, "Nothing re-queued", fmt.Sprintf("%q is not a message id (a positive number)", r.PostFormValue("id")))
			return
		}
		ids = []int64{id}
	}
	if !c.busy.TryLock() {
		c.fail(w, r, http.StatusConflict, "Nothing re-queued", "another action or a peek of this console is running; try again when it is done")
		return
	}
	defer c.busy.Unlock()
	ob, err := openOutbox(c.base, c.pool, c.db.schema)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "Nothing re-queued", oneLine(err))
		return
	}
	n, err := ob.RetryParked(c.base, ids...)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "Nothing re-queued", oneLine(err))
		return
	}
	c.logf("outbox retry from %s: re-queued %s (ids %v; none: every parked one)", r.RemoteAddr, plural(int(n), "parked message"), ids)
	d := c.page(r, "Outbox: re-queued "+plural(int(n), "parked message"))
	d.Back = "/#outbox"
	line := "Re-queued " + plural(int(n), "parked message") + " with their attempts reset: the relay publishes them again at once."
	if len(ids) == 1 && n == 0 {
		line = fmt.Sprintf("Message %d was not re-queued: it is not parked in %s.outbox_messages (no such id, already sent, or not failing).", ids[0], c.db.schema)
	}
	d.Result = &resultView{Lines: []string{line}}
	c.render(w, http.StatusOK, "result.html", d)
}

package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// addMany commits n rows for url in transactions of 500.
func (b *bundle) addMany(t testing.TB, url, prefix string, n int) {
	t.Helper()
	msgs := make([]outbox.Message, 0, 500)
	for i := range n {
		msgs = append(msgs, outbox.Message{Destination: url, Body: prefix + strconv.Itoa(i)})
		if len(msgs) == cap(msgs) || i == n-1 {
			b.add(t, msgs...)
			msgs = msgs[:0]
		}
	}
}

// TestSendersSizedToTheRoundTrip (real server behind the delaying proxy of harness/latency):
// with SQS 20 ms away, a relay at its defaults runs more senders than it starts with (four move
// 2,000 messages a second at most, and it measures that the call's round trip asks for more),
// and falls back to them once the backlog is gone; a fixed count stays fixed.
func TestSendersSizedToTheRoundTrip(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	proxy, client := proxiedClient(t)
	proxy.SetRTT(20*time.Millisecond, 0)
	for _, tc := range []struct {
		name    string
		senders int
	}{{"sized", 0}, {"fixed", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, nil)
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "senders"})
			const n = 3000
			b.addMany(t, q.URL, "m", n)
			rl := b.startRelay(t, outbox.RelayConfig{SQS: client, Senders: tc.senders})
			most, least := 0, outbox.MaxSenders
			waitStats(t, fmt.Sprintf("%d published", n), func() bool {
				s := rl.Stats()
				most, least = max(most, s.Senders), min(least, s.Senders)
				return s.Published == n
			}, rl)
			switch {
			case tc.senders == 0 && most < 2*outbox.DefaultSenders:
				t.Fatalf("at most %d senders with SQS 20 ms away; want at least %d", most, 2*outbox.DefaultSenders)
			case tc.senders > 0 && (most != tc.senders || least != tc.senders):
				t.Fatalf("senders from %d to %d; want %d throughout", least, most, tc.senders)
			}
			start := tc.senders
			if start == 0 {
				start = outbox.DefaultSenders
			}
			waitStats(t, fmt.Sprintf("the senders back at %d", start), func() bool { return rl.Stats().Senders == start }, rl)
		})
	}
}

// TestClaimFromTheCursorLeavesNoRowBehind (real server behind the delaying proxy, 5 ms): while
// a backlog is worked off in full claims, each starting past the last one's rows, a row committed
// after higher ids were (its id taken by a transaction that stayed open) is published before the
// backlog ends, not left behind the cursor until a claim comes up short.
func TestClaimFromTheCursorLeavesNoRowBehind(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	proxy, client := proxiedClient(t)
	proxy.SetRTT(5*time.Millisecond, 0)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cursor"})
	ctx := t.Context()
	late, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(context.WithoutCancel(ctx)) }()
	lateID, err := b.ob.Add(ctx, late, outbox.Message{Destination: q.URL, Body: "late"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	b.addMany(t, q.URL, "m", n)
	// One sender and claims of ten: some 300 claims, most of them from the cursor; no poll.
	rl := b.startRelay(t, outbox.RelayConfig{SQS: client, Senders: 1, ClaimSize: 10, PollInterval: time.Minute})
	waitStats(t, "a tenth published", func() bool { return rl.Stats().Published >= n/10 }, rl)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := rl.Stats().Published; p >= n {
		t.Fatalf("the backlog was gone (%d published) before the late row was committed; the test proves nothing", p)
	}
	waitStats(t, fmt.Sprintf("%d published", n+1), func() bool { return rl.Stats().Published == n+1 }, rl)
	var before, after int
	err = b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE o.sent_at < l.sent_at), count(*) FILTER (WHERE o.sent_at > l.sent_at)
		FROM `+b.schema+`.outbox_messages o, `+b.schema+`.outbox_messages l WHERE l.event_id = $1 AND o.event_id <> $1`, lateID).Scan(&before, &after)
	if err != nil {
		t.Fatal(err)
	}
	if after == 0 {
		t.Fatalf("the late row was published last (%d rows before it): it waited behind the cursor for the backlog to end", before)
	}
	t.Logf("the late row was published with %d rows before it and %d after", before, after)
	if c, err := sqstest.Count(ctx, srv.Client(), q.URL); err != nil || c != n+1 {
		t.Fatalf("%d messages in the queue (%v); want %d", c, err, n+1)
	}
}

// TestMarksRideWithClaims (real server, direct): while a backlog is worked off, the marks of the
// published batches go to PostgreSQL with the next claim, never in a round of their own, and at
// the backlog's end the last batches' marks go together: a backlog of 3,000 rows in claims of
// 100 costs about one round trip per claim. (Before marks could start a claim early, a claim's
// worth of marks went alone whenever the queue was still long: about one round in two.)
func TestMarksRideWithClaims(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.SendBatchResults)
	b := setup(t, nil)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "ride"})
	const n, claim = 3000, 100
	b.addMany(t, q.URL, "m", n)
	rl := b.startRelay(t, outbox.RelayConfig{SQS: srv.Client(), Senders: 4, ClaimSize: claim, PollInterval: time.Minute})
	waitStats(t, fmt.Sprintf("%d published", n), func() bool { return rl.Stats().Published == n }, rl)
	s := rl.Stats()
	mid := outbox.MarkRoundsMidBacklog(rl)
	t.Logf("%d rounds, %d with marks alone (%d of them while a claim was coming)", s.Rounds, s.MarkRounds, mid)
	if mid != 0 {
		t.Fatalf("%d rounds carried marks alone while a claim was coming for them to ride with; want 0", mid)
	}
	// 30 full claims and one that finds the table empty; the end's marks in a round or a few
	// (a report that comes more than 20 ms after the first of the end's goes in a round of its own).
	if s.MarkRounds > s.Rounds/3 {
		t.Fatalf("%d of %d rounds carried marks alone; want at most a third", s.MarkRounds, s.Rounds)
	}
}

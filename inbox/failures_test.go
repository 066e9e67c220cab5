package inbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestFailuresRecordedBoundedAndPurged (PostgreSQL): RecordFailures keeps the newest
// FailuresKept per (handler, event) and per message without a key, cuts the error text to
// MaxFailureText bytes of valid UTF-8 without NUL, finds failures by key and by message id with
// the queue and instance, and the purge deletes those older than the retention.
func TestFailuresRecordedBoundedAndPurged(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-1", Retention: time.Hour})
	ctx := t.Context()
	for i := range inbox.FailuresKept + 3 {
		err := b.ib.RecordFailures(ctx, []inbox.Failure{
			{Handler: "warehouse", EventID: "evt_1", MessageID: fmt.Sprintf("m%d", i), Queue: "orders", ReceiveCount: i + 1, Error: fmt.Sprintf("boom %d", i)},
			{Handler: "loyalty", EventID: "evt_1", MessageID: fmt.Sprintf("m%d", i), Queue: "orders", ReceiveCount: i + 1, Error: "nope"},
			{Handler: "warehouse", MessageID: "keyless-a", Error: "no key"},
			{Handler: "warehouse", MessageID: "keyless-b", Error: "no key"},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.ib.Failures(ctx, []string{"evt_1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, f := range got {
		per[f.Handler]++
	}
	if per["warehouse"] != inbox.FailuresKept || per["loyalty"] != inbox.FailuresKept {
		t.Fatalf("kept per handler %v, want %d each: %+v", per, inbox.FailuresKept, got)
	}
	newest := got[0]
	last := inbox.FailuresKept + 2
	if newest.MessageID != fmt.Sprintf("m%d", last) || newest.ReceiveCount != last+1 || newest.Queue != "orders" ||
		newest.Instance != "task-1" || newest.FailedAt.IsZero() || newest.EventID != "evt_1" {
		t.Errorf("newest failure %+v", newest)
	}
	for _, id := range []string{"keyless-a", "keyless-b"} {
		fs, err := b.ib.Failures(ctx, nil, []string{id})
		if err != nil || len(fs) != inbox.FailuresKept || fs[0].EventID != "" {
			t.Errorf("failures of %s: %d, %v (want %d, each without a key)", id, len(fs), err, inbox.FailuresKept)
		}
	}

	long := strings.Repeat("é", inbox.MaxFailureText) + "\x00\xff"
	if err := b.ib.RecordFailures(ctx, []inbox.Failure{{Handler: "h", EventID: "evt_long", MessageID: "m", Error: "a\x00b\xffc"}, {Handler: "h", EventID: "evt_long2", MessageID: "m", Error: long}}); err != nil {
		t.Fatalf("recording texts with NUL and bad UTF-8: %v", err)
	}
	fs, err := b.ib.Failures(ctx, []string{"evt_long", "evt_long2"}, nil)
	if err != nil || len(fs) != 2 {
		t.Fatalf("%v %+v", err, fs)
	}
	for _, f := range fs {
		if len(f.Error) > inbox.MaxFailureText || !utf8.ValidString(f.Error) || strings.Contains(f.Error, "\x00") {
			t.Errorf("error text of %s: %d bytes, valid %v", f.EventID, len(f.Error), utf8.ValidString(f.Error))
		}
	}
	if fs[0].Error != strings.Repeat("é", (inbox.MaxFailureText-3)/2)+"…" {
		t.Errorf("long text not cut at a character: ends %q", fs[0].Error[len(fs[0].Error)-8:])
	}
	if fs[1].Error != "a\uFFFDb\uFFFDc" {
		t.Errorf("short text %q", fs[1].Error)
	}

	// Age every failure but evt_long's past the retention: the purge deletes them.
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.inbox_failures SET failed_at = now() - interval '2 hours' WHERE event_id IS DISTINCT FROM 'evt_long'`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ib.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := b.pool.QueryRow(ctx, `SELECT array_agg(coalesce(event_id, message_id)) FROM `+b.schema+`.inbox_failures`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "evt_long" {
		t.Errorf("after the purge: %v, want only evt_long", left)
	}
}

// TestRecordFailuresCountsWhatItCannotWrite (PostgreSQL): a failure that cannot be written
// (here the table is gone) is an error, counted by FailuresNotRecorded.
func TestRecordFailuresCountsWhatItCannotWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.pool.Exec(t.Context(), `DROP TABLE `+b.schema+`.inbox_failures`); err != nil {
		t.Fatal(err)
	}
	err := b.ib.RecordFailures(t.Context(), []inbox.Failure{{Handler: "h", EventID: "e", MessageID: "m", Error: "x"}, {Handler: "h", EventID: "f", MessageID: "n", Error: "x"}})
	if err == nil || b.ib.FailuresNotRecorded() != 2 {
		t.Errorf("err %v, not recorded %d (want an error and 2)", err, b.ib.FailuresNotRecorded())
	}
}

// TestDiscardRecords (PostgreSQL): a discard needs who and why, records the body's SHA-256, and
// can be forgotten when its message could not be deleted.
func TestDiscardRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	d := inbox.Discard{Queue: "orders-dlq", MessageID: "m1", EventID: "evt_1", Body: "abc", By: "ana", Reason: "test order"}
	for _, bad := range []inbox.Discard{{MessageID: "m1", Reason: "r"}, {MessageID: "m1", By: "ana", Reason: " "}} {
		if _, err := b.ib.RecordDiscard(ctx, bad); err == nil || !strings.Contains(err.Error(), "m1") {
			t.Errorf("RecordDiscard(%+v): %v, want an error naming the message", bad, err)
		}
	}
	id, err := b.ib.RecordDiscard(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ib.Discards(ctx, []string{"m1"})
	if err != nil || len(got) != 1 || got[0].By != "ana" || got[0].Reason != "test order" || got[0].EventID != "evt_1" ||
		got[0].BodySHA256 != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" || got[0].Forced {
		t.Fatalf("Discards: %v %+v", err, got)
	}
	if err := b.ib.ForgetDiscard(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ib.Discards(ctx, []string{"m1"}); err != nil || len(got) != 0 {
		t.Errorf("after ForgetDiscard: %v %+v", err, got)
	}
}

// TestNoFailureRecords (PostgreSQL): with Config.NoFailureRecords, RecordFailures writes nothing.
func TestNoFailureRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{NoFailureRecords: true})
	if err := b.ib.RecordFailures(t.Context(), []inbox.Failure{{Handler: "h", EventID: "e", MessageID: "m", Error: "x"}}); err != nil {
		t.Fatal(err)
	}
	if fs, err := b.ib.Failures(t.Context(), []string{"e"}, nil); err != nil || len(fs) != 0 {
		t.Errorf("Failures: %v %+v; want none recorded", err, fs)
	}
}

package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// TestFIFOClaimReadsPastNoQueuedRows (real PostgreSQL; the relay is made, not started, and no SQS
// call is made): with 20,000 rows queued in 4 FIFO groups ahead of 100 standard rows, a claim
// takes the 4 groups' heads, and the next one (the heads in flight) the standard rows. Each reads
// a few thousand buffers at most, counted by EXPLAIN (ANALYZE, BUFFERS): read in id order, as the
// claim once was, it passed over every queued row of the groups, checking for each that an
// earlier row of its group was unsent (about 60,000 buffers, a second of CPU per claim).
func TestFIFOClaimReadsPastNoQueuedRows(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const (
		fifoURL = "https://sqs.us-east-1.amazonaws.com/123456789012/claims.fifo"
		stdURL  = "https://sqs.us-east-1.amazonaws.com/123456789012/claims"
		groups  = 4
		queued  = 20000
		bound   = 3000 // buffers per claim
	)
	for i := 0; i < queued; i += 500 {
		msgs := make([]outbox.Message, 0, 500)
		for j := i; j < i+500; j++ {
			msgs = append(msgs, outbox.Message{Destination: fifoURL, GroupID: fmt.Sprint("g", j%groups), Body: fmt.Sprint(j)})
		}
		b.add(t, msgs...)
	}
	var std []outbox.Message
	for j := range 100 {
		std = append(std, outbox.Message{Destination: stdURL, Body: fmt.Sprint("s", j)})
	}
	b.add(t, std...)
	ctx := t.Context()
	if _, err := b.pool.Exec(ctx, "ANALYZE "+b.schema+".outbox_messages"); err != nil {
		t.Fatal(err)
	}
	tx, claim := claimTx(t, b)
	claimOnce := func(tok, dest, group string) ([]string, int) {
		return claimBuffers(t, tx, claim, b.schema, tok, dest, group)
	}
	heads, buffers := claimOnce("first", "", "")
	t.Logf("the first claim took %v, reading %d buffers", heads, buffers)
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(heads, want) {
		t.Fatalf("the first claim took %v; want the heads of the %d groups, %v", heads, groups, want)
	}
	if buffers > bound {
		t.Fatalf("the first claim read %d buffers; want at most %d: it read rows queued behind the heads", buffers, bound)
	}
	took, buffers := claimOnce("second", "", "")
	t.Logf("the second claim took %d rows, reading %d buffers", len(took), buffers)
	if len(took) != 100 || took[0] != "s0" || took[99] != "s99" {
		t.Fatalf("the second claim took %d rows (%v ...); want the 100 standard rows, s0 to s99", len(took), took[:min(len(took), 5)])
	}
	if buffers > bound {
		t.Fatalf("the second claim read %d buffers; want at most %d: it read the FIFO groups' queued rows", buffers, bound)
	}
}

// claimBuffers runs the claim in tx with token tok, the FIFO scan starting past group (dest,
// group), and returns the bodies it took, in id order, and the buffers it read (EXPLAIN ANALYZE).
func claimBuffers(t *testing.T, tx pgx.Tx, claim, schema, tok, dest, group string) ([]string, int) {
	t.Helper()
	ctx := t.Context()
	var out []byte
	err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+claim,
		[]string{"sqs"}, 100, 30.0, tok, int64(0), dest, group).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	var ex []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(out, &ex); err != nil || len(ex) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v: %.300s", err, out)
	}
	rows, err := tx.Query(ctx, "SELECT body FROM "+schema+".outbox_messages WHERE lease_token = $1 ORDER BY id", tok)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return bodies, ex[0].Plan.Hit + ex[0].Plan.Read
}

// TestStandardClaimWithoutStatistics (real PostgreSQL; no SQS call): with 20,000 rows of a
// standard queue committed to a table the planner has no statistics of (new, or truncated), a
// claim takes the first 100 and reads a few thousand buffers at most. The claim runs with the
// settings that keep its plan on the indexes; a plan that matched the claimed ids against the
// unsent rows' index ordered by fifo first read that whole index once per id (9,353 buffers).
func TestStandardClaimWithoutStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const stdURL = "https://sqs.us-east-1.amazonaws.com/123456789012/nostats"
	for i := 0; i < 20000; i += 500 {
		msgs := make([]outbox.Message, 0, 500)
		for j := i; j < i+500; j++ {
			msgs = append(msgs, outbox.Message{Destination: stdURL, Body: fmt.Sprint("s", j)})
		}
		b.add(t, msgs...)
	}
	tx, claim := claimTx(t, b)
	took, buffers := claimBuffers(t, tx, claim, b.schema, "only", "", "")
	t.Logf("the claim took %d rows, reading %d buffers", len(took), buffers)
	if len(took) != 100 || took[0] != "s0" || took[99] != "s99" {
		t.Fatalf("the claim took %d rows (%v ...); want s0 to s99", len(took), took[:min(len(took), 5)])
	}
	if buffers > 3000 {
		t.Fatalf("the claim read %d buffers; want at most 3000", buffers)
	}
}

// TestFIFOClaimTakesTurns (real PostgreSQL; no SQS call): with more groups than a claim takes,
// the claim's scan of the groups starts past the group it is given and wraps around, so that
// each group's head gets its turn. Here, claims of 100 over 250 groups, each released before the
// next: the second starts at group 100, the third at 200 and takes 200 to 249, then 0 to 49.
func TestFIFOClaimTakesTurns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const fifoURL = "https://sqs.us-east-1.amazonaws.com/123456789012/turns.fifo"
	var msgs []outbox.Message
	for j := range 250 {
		msgs = append(msgs, outbox.Message{Destination: fifoURL, GroupID: fmt.Sprintf("g%03d", j), Body: fmt.Sprintf("g%03d", j)})
	}
	b.add(t, msgs...)
	ctx := t.Context()
	tx, claim := claimTx(t, b)
	group := ""
	for i, want := range [][2]string{{"g000", "g099"}, {"g100", "g199"}, {"g000", "g249"}} {
		rows, err := tx.Query(ctx, claim, []string{"sqs"}, 100, 30.0, fmt.Sprint("t", i), int64(0), fifoDest(group, fifoURL), group)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprint(vals[7])) // the group id, in the claim's order
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 100 || slices.Min(got) != want[0] || slices.Max(got) != want[1] {
			t.Fatalf("claim %d, past group %q, took %d groups from %s to %s; want 100 from %s to %s", i+1, group, len(got), slices.Min(got), slices.Max(got), want[0], want[1])
		}
		if i == 2 && (slices.Contains(got, "g050") || !slices.Contains(got, "g049") || !slices.Contains(got, "g200")) {
			t.Fatalf("claim 3 took %v; want groups 200 to 249, then 0 to 49", got)
		}
		group = got[len(got)-1] // the last in the claim's order: where the relay starts next
		if _, err := tx.Exec(ctx, "UPDATE "+b.schema+".outbox_messages SET claimed_until = NULL, lease_token = NULL"); err != nil {
			t.Fatal(err)
		}
	}
}

// claimTx returns a transaction, rolled back when the test ends, with the settings of a relay's
// round, and the relay's claim statement (a relay made on b's schema, not started).
func claimTx(t *testing.T, b *bundle) (pgx.Tx, string) {
	t.Helper()
	rl, err := outbox.NewRelay(b.pool, &outbox.RelayConfig{Schema: b.schema, SQS: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	plan, claim := outbox.ClaimSQL(rl)
	ctx := t.Context()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	if _, err := tx.Exec(ctx, plan); err != nil {
		t.Fatal(err)
	}
	return tx, claim
}

// fifoDest is the destination to pass with group: none before the first claim.
func fifoDest(group, url string) string {
	if group == "" {
		return ""
	}
	return url
}

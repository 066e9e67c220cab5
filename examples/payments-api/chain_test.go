package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// failingAmounts installs, until t ends, two faults in the database, each for one amount: 13
// makes the INSERT of the PaymentCaptured row fail (after the payment's INSERT, in the same
// transaction), and 14 makes the COMMIT fail (after the payment, the event and the stored
// response were written). Requests for them are answered 5xx every time.
func failingAmounts(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION public.test_fail_event() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF (NEW.body::jsonb->>'amount') = '13' THEN RAISE EXCEPTION 'test: outbox insert fails'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER test_fail_event BEFORE INSERT ON ` + outbox.DefaultSchema + `.outbox_messages FOR EACH ROW EXECUTE FUNCTION public.test_fail_event()`,
		`CREATE OR REPLACE FUNCTION public.test_fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.amount = 14 THEN RAISE EXCEPTION 'test: commit fails'; END IF; RETURN NEW; END $$`,
		`CREATE CONSTRAINT TRIGGER test_fail_commit AFTER INSERT ON public.payments DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION public.test_fail_commit()`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{
			`DROP TRIGGER test_fail_event ON ` + outbox.DefaultSchema + `.outbox_messages`, `DROP FUNCTION public.test_fail_event()`,
			`DROP TRIGGER test_fail_commit ON public.payments`, `DROP FUNCTION public.test_fail_commit()`,
		} {
			if _, err := pool.Exec(context.Background(), q); err != nil {
				t.Error(err)
			}
		}
	})
}

// startAPI runs the server (`payments-api`) until the test ends and returns its base URL.
func startAPI(t *testing.T, getenv func(string) string) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, getenv, nil, exampletest.Logger(t), func(a net.Addr) { addrs <- a })
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the server's graceful stop: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return "http://" + a.String()
	case err := <-done:
		done <- err
		t.Fatalf("serve: %v", err)
		return ""
	}
}

// TestPaymentCapturedChain follows the whole chain on fauxqs and PostgreSQL: HTTP clients
// create payments with Idempotency-Keys, several attempts of each at once and a retry after;
// the API writes the payment, the PaymentCaptured event (outbox) and the stored response in one
// transaction; its relay publishes the events; `payments-api worker` books them in the ledger
// through the inbox. Some requests are rejected (422), some fail after the payment's INSERT
// (the event's INSERT, or the COMMIT, fails: 5xx); a few events are published a second time,
// as a relay that crashed between its publish and its mark would. Every accepted request has
// exactly one payment, one event and one ledger row; no other request has any.
func TestPaymentCapturedChain(t *testing.T) {
	sqsSrv.Need(t, sqstest.SendBatchResults)
	srv := exampletest.Servers{DB: db, SQS: sqsSrv}
	pool := srv.Pool(t)
	q := srv.Queue(t, "payments-ledger")
	getenv := srv.Getenv(q.URL, "LISTEN_ADDR=127.0.0.1:0", "EVENTS_DESTINATION="+q.URL)
	if err := run(t.Context(), []string{"migrate"}, getenv, io.Discard, exampletest.Logger(t), nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	failingAmounts(t, pool)
	base := startAPI(t, getenv)
	ledger := srv.Start(t, ledgerSpec(), q.URL, workerapp.Options{Getenv: getenv})

	type request struct {
		client, key string
		amount      int64
		want        int // the status of every attempt; 0: 201 for the first, the same bytes after
	}
	var reqs []request
	var clients []string
	for c := range 3 {
		client := fmt.Sprintf("chain-%d-%d", c, time.Now().UnixNano()) // new clients: new keys on every run
		clients = append(clients, client)
		for k := range 20 {
			reqs = append(reqs, request{client: client, key: fmt.Sprintf("pay-%d", k), amount: int64(100 + 37*k + c)})
		}
		reqs = append(reqs,
			request{client: client, key: "bad-amount", amount: -5, want: http.StatusUnprocessableEntity},
			request{client: client, key: "event-fails", amount: 13, want: http.StatusInternalServerError},
			request{client: client, key: "commit-fails", amount: 14, want: http.StatusServiceUnavailable})
	}
	// Each request: three attempts at once, then one more after they have all answered.
	bodies := make([]string, len(reqs))
	var wg sync.WaitGroup
	for i, rq := range reqs {
		wg.Go(func() {
			body := fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, rq.amount)
			var mu sync.Mutex
			var got []reply
			var inner sync.WaitGroup
			for range 3 {
				inner.Go(func() {
					r := postQuiet(t, base, rq.client, rq.key, body)
					mu.Lock()
					got = append(got, r)
					mu.Unlock()
				})
			}
			inner.Wait()
			got = append(got, postQuiet(t, base, rq.client, rq.key, body))
			for _, r := range got {
				switch {
				case r.status == http.StatusConflict: // an attempt while another ran
				case rq.want != 0 && r.status != rq.want:
					t.Errorf("%s %s: %d %s, want %d", rq.client, rq.key, r.status, r.body, rq.want)
				case rq.want == 0 && r.status != http.StatusCreated:
					t.Errorf("%s %s: %d %s", rq.client, rq.key, r.status, r.body)
				case rq.want == 0 && bodies[i] == "":
					bodies[i] = string(r.body)
				case rq.want == 0 && string(r.body) != bodies[i]:
					t.Errorf("%s %s: two different 201 bodies:\n%s%s", rq.client, rq.key, bodies[i], r.body)
				}
			}
		})
	}
	wg.Wait()
	accepted := map[int64]request{} // by payment id
	for i, rq := range reqs {
		if rq.want != 0 {
			continue
		}
		var p Payment
		if err := json.Unmarshal([]byte(bodies[i]), &p); err != nil {
			t.Fatalf("%s %s: no 201 body: %q", rq.client, rq.key, bodies[i])
		}
		accepted[p.ID] = rq
	}
	ctx := t.Context()

	// Every event published and booked.
	sqstest.WaitFor(t, time.Minute, "the ledger to book every payment", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM public.ledger WHERE client_id = ANY($1)`, clients).Scan(&n)
		return err == nil && n >= len(accepted), fmt.Sprintf("%d of %d booked (%v)", n, len(accepted), err)
	})

	// The relay's gap, by hand: five events published again with their event ids, as a relay
	// that died after its publish and before its mark would. The inbox absorbs them.
	type row struct{ id, body string }
	var again []row
	rows, err := pool.Query(ctx, `SELECT event_id, body FROM `+outbox.DefaultSchema+`.outbox_messages
		WHERE body::jsonb->>'client_id' = ANY($1) ORDER BY id LIMIT 5`, clients)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.body); err != nil {
			t.Fatal(err)
		}
		again = append(again, r)
	}
	rows.Close()
	dupsBefore := ledger.Metrics.Get(worker.Duplicates)
	for i, r := range again {
		_, err := sqsSrv.Client().SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL),
			Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(r.body),
				MessageAttributes: map[string]types.MessageAttributeValue{
					outbox.EventIDAttribute: {DataType: aws.String("String"), StringValue: aws.String(r.id)}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	srv.WaitDrained(t, q.URL, time.Minute) // the worker deleted them: each was booked, or absorbed
	ledger.Stop(t)
	if d := ledger.Metrics.Get(worker.Duplicates) - dupsBefore; d < len(again) {
		t.Errorf("the worker absorbed %d duplicates after %d events were published again", d, len(again))
	}

	// One payment, one event (sent, with the derived id) and one ledger row per accepted
	// request; none for the others.
	type got struct {
		payments, events, unsent, booked int
		eventID, bookedEventID           string
	}
	per := map[int64]*got{}
	for _, q := range []string{
		`SELECT id, 'p', '' FROM public.payments WHERE client_id = ANY($1)`,
		`SELECT (body::jsonb->>'payment_id')::bigint, CASE WHEN sent_at IS NULL THEN 'u' ELSE 'e' END, event_id
			FROM ` + outbox.DefaultSchema + `.outbox_messages WHERE body::jsonb->>'client_id' = ANY($1)`,
		`SELECT payment_id, 'l', event_id FROM public.ledger WHERE client_id = ANY($1)`,
	} {
		rows, err := pool.Query(ctx, q, clients)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var what, ev string
			if err := rows.Scan(&id, &what, &ev); err != nil {
				t.Fatal(err)
			}
			g := per[id]
			if g == nil {
				g = &got{}
				per[id] = g
			}
			switch what {
			case "p":
				g.payments++
			case "u":
				g.unsent++
				fallthrough
			case "e":
				g.events++
				g.eventID = ev
			case "l":
				g.booked++
				g.bookedEventID = ev
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for id, g := range per {
		rq, ok := accepted[id]
		switch {
		case !ok:
			t.Errorf("payment %d is not one of the accepted requests: %+v", id, *g)
		case g.payments != 1 || g.events != 1 || g.unsent != 0 || g.booked != 1:
			t.Errorf("payment %d (%s %s): %d payments, %d events (%d unsent), %d ledger rows; want 1, 1 (0), 1", id, rq.client, rq.key, g.payments, g.events, g.unsent, g.booked)
		case g.eventID != paymentCapturedID(rq.client, rq.key) || g.bookedEventID != g.eventID:
			t.Errorf("payment %d: event id %q, booked as %q; want %q", id, g.eventID, g.bookedEventID, paymentCapturedID(rq.client, rq.key))
		}
	}
	if len(per) != len(accepted) {
		t.Errorf("%d payments with rows, %d accepted requests", len(per), len(accepted))
	}
	var processed, dups = ledger.Metrics.Get(worker.Processed), ledger.Metrics.Get(worker.Duplicates)
	t.Logf("%d requests (%d accepted, %d rejected or failed), %d attempts; %d events booked, %d duplicates absorbed by the inbox (%d published again by hand)",
		len(reqs), len(accepted), len(reqs)-len(accepted), 4*len(reqs), processed, dups, len(again))
}

// postQuiet is post without t.Fatal (it runs in goroutines): a transport error is a status 0.
func postQuiet(t *testing.T, base, client, key, body string) reply {
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-Id", client)
	req.Header.Set(idempotency.HeaderKey, key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s %s: %v", client, key, err)
		return reply{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("POST %s %s: %v", client, key, err)
	}
	return reply{res.StatusCode, res.Header, b}
}

// TestRefusesWithoutEventsDestination: the server refuses to start without a destination for
// its events, and with one that is neither a queue URL nor a topic ARN.
func TestRefusesWithoutEventsDestination(t *testing.T) {
	srv := exampletest.Servers{DB: db, SQS: sqsSrv}
	for _, dest := range []string{"", "payments"} {
		getenv := srv.Getenv("", "LISTEN_ADDR=127.0.0.1:0", "EVENTS_DESTINATION="+dest)
		err := run(t.Context(), nil, getenv, nil, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), "EVENTS_DESTINATION") {
			t.Errorf("EVENTS_DESTINATION=%q: got %v, want a refusal that names EVENTS_DESTINATION", dest, err)
		}
	}
}

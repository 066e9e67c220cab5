package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// TestFullChainUnderFaults runs the whole chain as real processes (the example's binary) and
// SIGKILLs them while requests and events are in flight: the API (which runs the relay) three
// times and the worker three times, each restarted. HTTP clients send payments, each request
// with its own Idempotency-Key, and retry it with the same key on any error, timeout, refused
// connection, 409 or 5xx until it has a final answer (2xx, or the 4xx of a request designed to
// be rejected); some attempts are cut off by the client after a few milliseconds, as a response
// lost in a tunnel. The reliability harness's SQS proxy, in front of fauxqs, counts what the
// relay publishes and what the worker receives and deletes, and times some of the kills: the API right after a
// SendMessageBatch stored its entries (before the relay marks them sent: they are published
// again), the worker right after a receive, or once it committed and before its delete (the
// copy comes back and the inbox absorbs it). After the clients, the relay and the worker have
// drained, every accepted request has exactly one payment, one sent outbox row with the derived
// event id and one ledger row; no rejected request has any. Servers: PostgreSQL and fauxqs (it
// skips on GoAws, whose SendMessageBatch answers list no stored entries).
func TestFullChainUnderFaults(t *testing.T) {
	sqsSrv.Need(t, sqstest.SendBatchResults)
	began := time.Now()
	ctx := t.Context()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)

	srv := exampletest.Servers{DB: db, SQS: sqsSrv}
	pool := srv.Pool(t)
	// No DLQ: a message whose worker is killed a few times must come back, never be parked. A
	// short visibility timeout brings the deliveries of a killed worker back quickly.
	q := sqsSrv.CreateQueue(t, sqstest.QueueOptions{Prefix: "payments-faults", VisibilityTimeout: 3 * time.Second})
	if err := run(ctx, []string{"migrate"}, srv.Getenv(""), io.Discard, exampletest.Logger(t), nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	bin, err := reliability.BuildProgram(ctx, ".", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(began)
	tap, err := reliability.NewSQSProxy(sqsSrv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tap.Close)
	addr, err := reliability.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	procs := &reliability.Procs{Dir: t.TempDir(), Env: []string{
		"DATABASE_URL=" + db.URL, "LISTEN_ADDR=" + addr, "EVENTS_DESTINATION=" + q.URL, "QUEUE_URL=" + q.URL,
		// A relay killed holding claimed rows delays them by its lease: 4 s, not a minute.
		"RELAY_LEASE=4s",
		"AWS_ENDPOINT_URL_SQS=" + tap.Endpoint(), "LOG_LEVEL=warn",
	}}
	t.Cleanup(procs.KillAll) // before the proxy's cleanup runs (cleanups run last first)
	// start starts the next incarnation of role (api-0, api-1, ...); a worker gets a metrics
	// server of its own, read before each kill.
	incarnations := map[string]int{}
	start := func(role string) (*reliability.Proc, error) {
		id := fmt.Sprintf("%s-%d", role, incarnations[role])
		incarnations[role]++
		if role == "api" {
			return procs.Start(id, exec.Command(bin))
		}
		metrics, err := reliability.FreeAddr()
		if err != nil {
			return nil, err
		}
		return procs.Start(id, exec.Command(bin, "worker"), "METRICS_ADDR="+metrics)
	}

	api, err := start("api")
	if err != nil {
		t.Fatal(err)
	}
	if err := waitServing(ctx, base, api); err != nil {
		t.Fatal(err)
	}
	wk, err := start("worker")
	if err != nil {
		t.Fatal(err)
	}

	// The clients.
	const nClients, minPerClient = 6, 10
	runID := time.Now().UnixNano()
	clientIDs := make([]string, nClients)
	results := make([][]*chainRequest, nClients)
	var stats attemptStats
	var inFlight atomic.Int64 // HTTP attempts in flight
	stopNew := make(chan struct{})
	clientsDeadline := time.Now().Add(40 * time.Second)
	var clients sync.WaitGroup
	for c := range nClients {
		clientIDs[c] = fmt.Sprintf("faults-%d-%d", runID, c)
		crng := rand.New(rand.NewPCG(seed, uint64(c)+1))
		clients.Go(func() {
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			defer hc.CloseIdleConnections()
			for i := 0; ; i++ {
				select {
				case <-stopNew:
					if i >= minPerClient {
						return
					}
				default:
				}
				rq := newChainRequest(clientIDs[c], i, c)
				rq.send(ctx, hc, base, crng, &stats, &inFlight, clientsDeadline)
				results[c] = append(results[c], rq)
				if ctx.Err() != nil {
					return
				}
				time.Sleep(time.Duration(10+crng.IntN(50)) * time.Millisecond) // the client's pace
			}
		})
	}

	// The killer: six kills, the API's and the worker's in a random order, each timed by a trap
	// (or by HTTP requests in flight), spread over the run, each followed by a restart.
	traps := map[string]reliability.TrapPoint{"publish": reliability.AfterPublish, "receive": reliability.AfterReceive, "delete": reliability.BeforeDelete}
	plan := []string{"api:publish", "api:http", []string{"api:publish", "api:http"}[rng.IntN(2)],
		"worker:receive", "worker:delete", []string{"worker:receive", "worker:delete"}[rng.IntN(2)]}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	var kills []killRecord
	var workerDups, workerProcessed int // the killed workers' counters, read before each kill
	killerErr := func() error {
		defer close(stopNew)
		for _, k := range plan {
			// The gap before each kill is a fault parameter, not a synchronisation.
			if !sleepCtx(ctx, time.Duration(700+rng.IntN(1500))*time.Millisecond) {
				return ctx.Err()
			}
			role, how, _ := strings.Cut(k, ":")
			victim := api
			if role == "worker" {
				victim = wk
			}
			if done, err := victim.Exited(); done {
				return fmt.Errorf("%s exited by itself before its kill: %w\n%s", victim.ID, err, victim.Tail(4000))
			}
			rec := killRecord{proc: victim.ID, how: how}
			var tr *reliability.Trap
			switch how {
			case "http":
				rec.landed = waitUntil(6*time.Second, func() bool { return inFlight.Load() > 0 })
			default:
				// Only while HTTP requests are in flight too.
				tr = tap.Arm(traps[how], func() bool { return inFlight.Load() > 0 })
				rec.landed = tap.Await(tr, 6*time.Second)
				if how == "receive" && rec.landed {
					// Let the worker get into the batch it just received: its handler, its
					// commit or its delete.
					time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				}
			}
			rec.at = time.Since(began)
			rec.httpInFlight = inFlight.Load()
			rec.deliveriesInFlight = tap.Unsettled()
			rec.published, rec.unmarked = tap.Traffic().PublishedCopies(), unsentCount(ctx, pool, q.URL)
			if role == "worker" {
				// Its counters die with it: read them first (what it absorbs between this
				// read and the kill is not counted).
				m := scrapeWorker(ctx, victim)
				workerDups, workerProcessed = workerDups+m["duplicates"], workerProcessed+m["processed"]
			}
			victim.Kill()
			if tr != nil {
				tr.Release()
			}
			if role == "worker" {
				tap.ForgetUnsettled() // the dead worker's: they come back after the visibility timeout
			}
			kills = append(kills, rec)
			// Down for a moment: the clients see refused connections.
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			receives := func() int { return tap.Calls().Count("ReceiveMessage") }
			before := receives() // the dead worker makes no more
			next, err := start(role)
			if err != nil {
				return err
			}
			if role == "api" {
				api = next
				if err := waitServing(ctx, base, api); err != nil {
					return err
				}
			} else {
				wk = next
				if !waitUntil(30*time.Second, func() bool { return receives() > before }) {
					return fmt.Errorf("%s made no SQS request within 30 s\n%s", wk.ID, wk.Tail(4000))
				}
			}
		}
		return nil
	}()
	trafficEnded := time.Since(began)
	clients.Wait()
	if killerErr != nil {
		t.Fatalf("the killer: %v", killerErr)
	}
	clientsDone := time.Since(began)

	// What the clients were told.
	accepted := map[string]*chainRequest{} // by event id
	rejected := map[string]*chainRequest{}
	var nRequests int
	for _, rs := range results {
		for _, rq := range rs {
			nRequests++
			switch {
			case rq.err != "":
				t.Errorf("%s %s: %s", rq.client, rq.key, rq.err)
			case rq.want == 0 && rq.status != http.StatusCreated:
				t.Errorf("%s %s (valid): final answer %d %s", rq.client, rq.key, rq.status, rq.answer)
			case rq.want != 0 && rq.status != rq.want:
				t.Errorf("%s %s (invalid): final answer %d %s, want %d", rq.client, rq.key, rq.status, rq.answer, rq.want)
			case rq.want == 0:
				if err := json.Unmarshal(rq.answer, &rq.payment); err != nil || rq.payment.ID == 0 || rq.payment.Amount != rq.amount {
					t.Errorf("%s %s: 201 with %s (%v)", rq.client, rq.key, rq.answer, err)
				}
				accepted[paymentCapturedID(rq.client, rq.key)] = rq
			default:
				rejected[paymentCapturedID(rq.client, rq.key)] = rq
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Drained: the relay has published every row (the rows of a killed relay once their lease
	// passed), then the worker has booked every accepted payment and the queue is empty.
	sqstest.WaitFor(t, 30*time.Second, "the relay to publish every row", func() (bool, string) {
		n := unsentCount(ctx, pool, q.URL)
		return n == 0, fmt.Sprintf("%d rows unsent", n)
	})
	sqstest.WaitFor(t, 30*time.Second, "the worker to book every payment and the queue to drain", func() (bool, string) {
		var booked int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.ledger WHERE client_id = ANY($1)`, clientIDs).Scan(&booked); err != nil {
			return false, err.Error()
		}
		left, err := sqstest.Count(ctx, sqsSrv.Client(), q.URL)
		if err != nil {
			return false, err.Error()
		}
		return booked >= len(accepted) && left == 0, fmt.Sprintf("%d of %d booked, %d messages in the queue", booked, len(accepted), left)
	})
	drained := time.Since(began)
	m := scrapeWorker(ctx, wk)
	workerDups, workerProcessed = workerDups+m["duplicates"], workerProcessed+m["processed"]
	// A graceful stop of the last incarnations.
	for _, p := range []*reliability.Proc{api, wk} {
		if err := p.Term(40 * time.Second); err != nil {
			t.Errorf("%s: SIGTERM: %v\n%s", p.ID, err, p.Tail(4000))
		}
	}
	for _, p := range procs.All() {
		if out := p.Output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
			t.Errorf("%s reported a race or a panic:\n%s", p.ID, out)
		}
	}

	// The rows.
	payments := map[int64]int{} // payment id -> rows
	var paymentsOf int
	rows, err := pool.Query(ctx, `SELECT id FROM public.payments WHERE client_id = ANY($1)`, clientIDs)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		payments[id]++
		paymentsOf++
	}
	rows.Close()
	type evRows struct {
		outbox, unsent, ledger, inbox int
		outboxPayment, ledgerPayment  int64
	}
	per := map[string]*evRows{}
	get := func(ev string) *evRows {
		if per[ev] == nil {
			per[ev] = &evRows{}
		}
		return per[ev]
	}
	var eventIDs []string // of every request, accepted or rejected
	for ev := range accepted {
		eventIDs = append(eventIDs, ev)
	}
	for ev := range rejected {
		eventIDs = append(eventIDs, ev)
	}
	for _, qq := range []struct {
		what, sql string
		arg       any
	}{
		{"outbox", `SELECT event_id, (body::jsonb->>'payment_id')::bigint, sent_at IS NULL FROM ` + outbox.DefaultSchema +
			`.outbox_messages WHERE destination = $1`, q.URL},
		{"ledger", `SELECT event_id, payment_id, false FROM public.ledger WHERE client_id = ANY($1)`, clientIDs},
		{"inbox", `SELECT event_id, 0::bigint, false FROM ` + inbox.DefaultSchema + `.processed_messages
			WHERE handler = '` + ledgerName + `' AND event_id = ANY($1)`, eventIDs},
	} {
		rows, err := pool.Query(ctx, qq.sql, qq.arg)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var ev string
			var pid int64
			var unsent bool
			if err := rows.Scan(&ev, &pid, &unsent); err != nil {
				t.Fatal(err)
			}
			g := get(ev)
			switch qq.what {
			case "outbox":
				g.outbox++
				g.outboxPayment = pid
				if unsent {
					g.unsent++
				}
			case "ledger":
				g.ledger++
				g.ledgerPayment = pid
			case "inbox":
				g.inbox++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Each kind of violation is reported once, with its count and a few examples.
	var kinds []string
	found := map[string][]string{}
	bad := func(kind, format string, args ...any) {
		if found[kind] == nil {
			kinds = append(kinds, kind)
		}
		found[kind] = append(found[kind], fmt.Sprintf(format, args...))
	}
	var ledgerRows int
	for ev, g := range per {
		ledgerRows += g.ledger
		rq, ok := accepted[ev]
		if !ok {
			if r := rejected[ev]; r != nil {
				bad("a rejected request with rows", "%s %s (%d): %+v", r.client, r.key, r.status, *g)
			} else {
				bad("an event of no request", "%s: %+v", ev, *g)
			}
			continue
		}
		what := fmt.Sprintf("%s %s (payment %d)", rq.client, rq.key, rq.payment.ID)
		if g.ledger != 1 {
			bad("an accepted request without exactly one ledger row", "%s: %d ledger rows", what, g.ledger)
		}
		if g.outbox != 1 || g.unsent != 0 {
			bad("an accepted request without exactly one sent outbox row", "%s: %d outbox rows, %d unsent", what, g.outbox, g.unsent)
		}
		if g.inbox != 1 {
			bad("an accepted request without its inbox row", "%s: %d inbox rows", what, g.inbox)
		}
		if g.outbox == 1 && g.outboxPayment != rq.payment.ID || g.ledger == 1 && g.ledgerPayment != rq.payment.ID {
			bad("an event or ledger row naming another payment", "%s: the event names %d, the ledger row %d", what, g.outboxPayment, g.ledgerPayment)
		}
	}
	for ev, rq := range accepted {
		if per[ev] == nil {
			bad("an accepted request without its event and ledger row", "%s %s (payment %d)", rq.client, rq.key, rq.payment.ID)
		}
		if n := payments[rq.payment.ID]; n != 1 {
			bad("an accepted request without exactly one payment row", "%s %s: %d rows of payment %d", rq.client, rq.key, n, rq.payment.ID)
		}
		delete(payments, rq.payment.ID)
	}
	for id := range payments {
		bad("a payment no client was told of", "payment %d", id)
	}
	for _, k := range kinds {
		ex := found[k]
		t.Errorf("%d times %s, e.g.:\n\t%s", len(ex), k, strings.Join(ex[:min(len(ex), 5)], "\n\t"))
	}

	// What went through SQS.
	tc := tap.Traffic()
	for ev := range tc.Published {
		if accepted[ev] == nil {
			t.Errorf("event %s was published, and is not the event of an accepted request", ev)
		}
	}
	if len(tc.Published) != len(accepted) {
		t.Errorf("%d distinct events published, %d accepted requests", len(tc.Published), len(accepted))
	}

	// The report.
	var landed int
	for _, k := range kills {
		t.Logf("kill %-9s at %5.1fs, %-7s landed %-5v: %d HTTP attempts in flight, %d deliveries in flight, %d published so far, %d outbox rows unsent",
			k.proc, k.at.Seconds(), k.how, k.landed, k.httpInFlight, k.deliveriesInFlight, k.published, k.unmarked)
		if k.landed {
			landed++
		}
	}
	if landed < len(kills) {
		t.Errorf("only %d of %d kills landed in their window", landed, len(kills))
	}
	var apiKills, workerKills int
	for _, k := range kills {
		if strings.HasPrefix(k.proc, "api") {
			apiKills++
		} else {
			workerKills++
		}
	}
	copies := tc.PublishedCopies()
	t.Logf("requests %d (accepted %d, rejected %d); attempts %d (transport errors %d, cut off by the client %d, 409 %d, 5xx %d)",
		nRequests, len(accepted), len(rejected), stats.attempts.Load(), stats.transport.Load(), stats.cutoff.Load(), stats.conflicts.Load(), stats.serverErrors.Load())
	t.Logf("kills: API %d, worker %d (%d landed in their window); processes started %d", apiKills, workerKills, landed, len(procs.All()))
	t.Logf("events published %d (distinct %d, published again %d); deliveries received %d (%d not booked: absorbed, or cut by a kill before their commit), messages deleted %d",
		copies, len(tc.Published), copies-len(tc.Published), tc.Deliveries(), tc.Deliveries()-ledgerRows, tc.Deleted)
	t.Logf("ledger rows %d; payments %d; the workers' counters (read before each kill): processed %d, duplicates absorbed by the inbox %d",
		ledgerRows, paymentsOf, workerProcessed, workerDups)
	if workerProcessed > ledgerRows {
		t.Errorf("the workers processed %d events, and the ledger has %d rows", workerProcessed, ledgerRows)
	}
	t.Logf("wall: build %.1fs, traffic until %.1fs, clients done %.1fs, drained %.1fs, total %.1fs",
		built.Seconds(), trafficEnded.Seconds(), clientsDone.Seconds(), drained.Seconds(), time.Since(began).Seconds())
}

// chainRequest is one payment request of a client and what it was finally answered.
type chainRequest struct {
	client, key, body string
	amount            int64
	want              int // 0: a valid request (201); else the 4xx it must be rejected with

	status   int
	answer   []byte
	attempts int
	err      string
	payment  Payment
}

// newChainRequest returns a client's i-th request: one in eight is invalid (a negative amount
// or a bad currency: 422; a body that is not JSON: 400).
func newChainRequest(client string, i, c int) *chainRequest {
	rq := &chainRequest{client: client, key: fmt.Sprintf("pay-%d", i), amount: int64(100 + 10*i + c)}
	rq.body = fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, rq.amount)
	if i%8 == 3 {
		switch i / 8 % 3 {
		case 0:
			rq.body, rq.want = `{"amount": -5, "currency": "EUR"}`, http.StatusUnprocessableEntity
		case 1:
			rq.body, rq.want = fmt.Sprintf(`{"amount": %d, "currency": "euro"}`, rq.amount), http.StatusUnprocessableEntity
		default:
			rq.body, rq.want = fmt.Sprintf(`{"amount": %d`, rq.amount), http.StatusBadRequest
		}
	}
	return rq
}

type attemptStats struct {
	attempts, transport, cutoff, conflicts, serverErrors atomic.Int64
}

// send sends the request, with the same Idempotency-Key, until it has a final answer: a 2xx,
// or a 4xx other than 409. A transport error (refused, reset), a timeout, a 409 or a 5xx is
// retried after a short jittered pause. About one attempt in seven is cut off by the client
// after 2 to 30 ms.
func (rq *chainRequest) send(ctx context.Context, hc *http.Client, base string, rng *rand.Rand, st *attemptStats, inFlight *atomic.Int64, deadline time.Time) {
	for {
		if time.Now().After(deadline) {
			rq.err = fmt.Sprintf("no final answer after %d attempts", rq.attempts)
			return
		}
		rq.attempts++
		st.attempts.Add(1)
		timeout, cut := 10*time.Second, rng.IntN(7) == 0
		if cut {
			timeout = time.Duration(2+rng.IntN(29)) * time.Millisecond
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		req, _ := http.NewRequestWithContext(actx, http.MethodPost, base+"/payments", strings.NewReader(rq.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Client-Id", rq.client)
		req.Header.Set(idempotency.HeaderKey, rq.key)
		inFlight.Add(1)
		res, err := hc.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		inFlight.Add(-1)
		cancel()
		switch {
		case ctx.Err() != nil:
			rq.err = "the test ended"
			return
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			if cut {
				st.cutoff.Add(1)
			} else {
				st.transport.Add(1)
			}
		case err != nil:
			st.transport.Add(1)
		case res.StatusCode == http.StatusConflict:
			st.conflicts.Add(1)
		case res.StatusCode >= 500:
			st.serverErrors.Add(1)
		default:
			rq.status, rq.answer = res.StatusCode, b
			return
		}
		time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond) // the retry's backoff
	}
}

type killRecord struct {
	proc, how                     string
	at                            time.Duration
	landed                        bool
	httpInFlight                  int64
	deliveriesInFlight, published int
	unmarked                      int
}

// waitServing waits until the API at base answers (a GET without X-Client-Id: 401).
func waitServing(ctx context.Context, base string, p *reliability.Proc) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/payments/1", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited: %w\n%s", p.ID, err, p.Tail(4000))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not serve on %s after 30 s\n%s", p.ID, base, p.Tail(4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitUntil polls cond every millisecond for up to timeout.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unsentCount is the number of outbox rows for dest not marked sent, or -1 when the query fails.
func unsentCount(ctx context.Context, pool *pgxpool.Pool, dest string) int {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+outbox.DefaultSchema+`.outbox_messages WHERE destination = $1 AND sent_at IS NULL`, dest).Scan(&n); err != nil {
		return -1
	}
	return n
}

// scrapeWorker reads a worker process's counters from its /metrics: processed, duplicates.
func scrapeWorker(ctx context.Context, p *reliability.Proc) map[string]int {
	out := map[string]int{}
	addr := p.Getenv("METRICS_ADDR")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for line := range strings.Lines(string(b)) {
		for _, c := range []string{"processed", "duplicates"} {
			if rest, ok := strings.CutPrefix(line, "sqsinbox_worker_"+c+"_total{"); ok {
				var n float64
				if _, err := fmt.Sscan(rest[strings.IndexByte(rest, '}')+1:], &n); err == nil {
					out[c] += int(n)
				}
			}
		}
	}
	return out
}

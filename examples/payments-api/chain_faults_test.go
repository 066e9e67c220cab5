package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/internal/exampletest"
	"github.com/sqsinbox/sqsinbox/internal/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// TestFullChainUnderFaults runs the whole chain as real processes (the example's binary) and
// SIGKILLs them while requests and events are in flight: the API (which runs the relay) three
// times and the worker three times, each restarted. HTTP clients send payments, each request
// with its own Idempotency-Key, and retry it with the same key on any error, timeout, refused
// connection, 409 or 5xx until it has a final answer (2xx, or the 4xx of a request designed to
// be rejected); some attempts are cut off by the client after a few milliseconds, as a response
// lost in a tunnel. An SQS proxy in front of fauxqs counts what the relay publishes and what the
// worker receives and deletes, and times some of the kills: the API right after a
// SendMessageBatch stored its entries (before the relay marks them sent: they are published
// again), the worker right after a receive, or once it committed and before its delete (the
// copy comes back and the inbox absorbs it). After the clients, the relay and the worker have
// drained, every accepted request has exactly one payment, one sent outbox row with the derived
// event id and one ledger row; no rejected request has any.
func TestFullChainUnderFaults(t *testing.T) {
	skipGoAws(t)
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
	bin := buildExample(t)
	built := time.Since(began)
	tap := newSQSTap(t, sqsSrv.Endpoint)
	addr := freeAddr(t)
	base := "http://" + addr
	procs := &chainProcs{bin: bin, dir: t.TempDir(), count: map[string]int{}, env: []string{
		"DATABASE_URL=" + db.URL, "LISTEN_ADDR=" + addr, "EVENTS_DESTINATION=" + q.URL, "QUEUE_URL=" + q.URL,
		// A relay killed holding claimed rows delays them by its lease: 4 s, not a minute.
		"RELAY_LEASE=4s",
		"AWS_ENDPOINT_URL_SQS=" + tap.URL(), "LOG_LEVEL=warn",
	}}
	t.Cleanup(procs.killAll) // before the tap's cleanup runs (cleanups run last first)

	api, err := procs.start("api", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitServing(ctx, base, api); err != nil {
		t.Fatal(err)
	}
	wk, err := procs.start("worker", workerEnv(t), "worker")
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
			if done, err := victim.exited(); done {
				return fmt.Errorf("%s exited by itself before its kill: %w\n%s", victim.name, err, victim.tail())
			}
			rec := killRecord{proc: victim.name, how: how}
			var tr *trap
			switch how {
			case "http":
				rec.landed = waitUntil(6*time.Second, func() bool { return inFlight.Load() > 0 })
			default:
				// Only while HTTP requests are in flight too.
				tr = tap.arm(how, func() bool { return inFlight.Load() > 0 })
				select {
				case <-tr.hit:
					rec.landed = true
				case <-time.After(6 * time.Second):
					if !tap.disarm(tr) {
						<-tr.hit
						rec.landed = true
					}
				}
				if how == "receive" && rec.landed {
					// Let the worker get into the batch it just received: its handler, its
					// commit or its delete.
					time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				}
			}
			rec.at = time.Since(began)
			rec.httpInFlight = inFlight.Load()
			rec.deliveriesInFlight = tap.deliveriesInFlight()
			rec.published, rec.unmarked = tap.publishedCount(), unsentCount(ctx, pool, q.URL)
			if role == "worker" {
				// Its counters die with it: read them first (what it absorbs between this
				// read and the kill is not counted).
				m := scrapeWorker(ctx, victim)
				workerDups, workerProcessed = workerDups+m["duplicates"], workerProcessed+m["processed"]
			}
			victim.kill()
			if tr != nil {
				close(tr.release)
			}
			if role == "worker" {
				tap.forgetDeliveries() // the dead worker's: they come back after the visibility timeout
			}
			kills = append(kills, rec)
			// Down for a moment: the clients see refused connections.
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			var next *chainProc
			var err error
			if role == "api" {
				next, err = procs.start(role, nil)
			} else {
				next, err = procs.start(role, workerEnv(t), "worker")
			}
			if err != nil {
				return err
			}
			if role == "api" {
				api = next
				if err := waitServing(ctx, base, api); err != nil {
					return err
				}
			} else {
				before := tap.receives.Load()
				wk = next
				if !waitUntil(30*time.Second, func() bool { return tap.receives.Load() > before }) {
					return fmt.Errorf("%s made no SQS request within 30 s\n%s", wk.name, wk.tail())
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
	for _, p := range []*chainProc{api, wk} {
		if err := p.term(40 * time.Second); err != nil {
			t.Errorf("%s: SIGTERM: %v\n%s", p.name, err, p.tail())
		}
	}
	for _, p := range procs.all {
		if out := p.output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
			t.Errorf("%s reported a race or a panic:\n%s", p.name, out)
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
	tc := tap.counts()
	for ev := range tc.published {
		if accepted[ev] == nil {
			t.Errorf("event %s was published, and is not the event of an accepted request", ev)
		}
	}
	if len(tc.published) != len(accepted) {
		t.Errorf("%d distinct events published, %d accepted requests", len(tc.published), len(accepted))
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
	copies := tc.publishedCopies()
	t.Logf("requests %d (accepted %d, rejected %d); attempts %d (transport errors %d, cut off by the client %d, 409 %d, 5xx %d)",
		nRequests, len(accepted), len(rejected), stats.attempts.Load(), stats.transport.Load(), stats.cutoff.Load(), stats.conflicts.Load(), stats.serverErrors.Load())
	t.Logf("kills: API %d, worker %d (%d landed in their window); processes started %d", apiKills, workerKills, landed, len(procs.all))
	t.Logf("events published %d (distinct %d, published again %d); deliveries received %d (%d not booked: absorbed, or cut by a kill before their commit), messages deleted %d",
		copies, len(tc.published), copies-len(tc.published), tc.receivedTotal(), tc.receivedTotal()-ledgerRows, tc.deletes)
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

// buildExample builds the example's binary into a temporary directory, with -race when the
// test binary has it.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "payments-api")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(t.Context(), "go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitServing waits until the API at base answers (a GET without X-Client-Id: 401).
func waitServing(ctx context.Context, base string, p *chainProc) error {
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
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited: %w\n%s", p.name, err, p.tail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not serve on %s after 30 s\n%s", p.name, base, p.tail())
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

// chainProcs are the example's processes of the test.
type chainProcs struct {
	bin, dir string
	env      []string
	mu       sync.Mutex
	count    map[string]int
	all      []*chainProc
}

type chainProc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

// start starts the next incarnation of role (api-0, api-1, ...), its output in a file.
func (ps *chainProcs) start(role string, env []string, args ...string) (*chainProc, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	name := fmt.Sprintf("%s-%d", role, ps.count[role])
	ps.count[role]++
	p := &chainProc{name: name, log: filepath.Join(ps.dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(ps.bin, args...)
	p.cmd.Env = append(append(os.Environ(), ps.env...), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	ps.all = append(ps.all, p)
	return p, nil
}

func (ps *chainProcs) killAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		p.kill()
	}
}

func (p *chainProc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// kill SIGKILLs the process and waits for its end.
func (p *chainProc) kill() {
	if done, _ := p.exited(); done {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to timeout for a clean exit.
func (p *chainProc) term(timeout time.Duration) error {
	if done, err := p.exited(); done {
		return fmt.Errorf("exited before: %w", err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("no exit within %v", timeout)
	}
}

func (p *chainProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *chainProc) tail() string {
	s := p.output()
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

// sqsTap is an HTTP proxy in front of the SQS server. It counts what the relay stores
// (SendMessageBatch) and what the worker receives and deletes, per event id, and springs the
// killer's traps: "publish" right after a SendMessageBatch stored its entries (the relay has not
// marked them sent), "receive" when a receive returns messages, "delete" before a delete reaches
// the server (the worker has committed). The publish and delete traps hold the call until the
// killer has killed the process.
type sqsTap struct {
	srv      *http.Server
	ln       net.Listener
	rp       *httputil.ReverseProxy
	receives atomic.Int64 // ReceiveMessage calls

	mu        sync.Mutex
	trap      *trap
	published map[string]int  // event id -> copies stored
	received  map[string]int  // event id -> deliveries
	pending   map[string]bool // receipt handles received and not deleted
	deletes   int
}

type trap struct {
	op           string
	when         func() bool // the trap springs only while this holds
	hit, release chan struct{}
}

type tapCall struct {
	op   string
	body []byte
}

type tapKey struct{}

var errKilled = errors.New("the caller was killed")

func newSQSTap(t *testing.T, endpoint string) *sqsTap {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &sqsTap{ln: ln, published: map[string]int{}, received: map[string]int{}, pending: map[string]bool{}}
	p.rp = httputil.NewSingleHostReverseProxy(target)
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	p.rp.Transport = tr
	p.rp.ModifyResponse = p.response
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = p.srv.Close()
		tr.CloseIdleConnections()
	})
	return p
}

func (p *sqsTap) URL() string { return "http://" + p.ln.Addr().String() }

func (p *sqsTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if op == "ReceiveMessage" {
		p.receives.Add(1)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if op == "DeleteMessage" || op == "DeleteMessageBatch" {
		if tr := p.spring("delete"); tr != nil {
			<-tr.release
			w.WriteHeader(http.StatusBadGateway)
			return
		}
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tapKey{}, &tapCall{op: op, body: body})))
}

func (p *sqsTap) response(res *http.Response) error {
	call, _ := res.Request.Context().Value(tapKey{}).(*tapCall)
	if call == nil || res.StatusCode != http.StatusOK {
		return nil
	}
	switch call.op {
	case "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch":
	default:
		return nil
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewReader(b))
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if b, err = io.ReadAll(zr); err != nil {
			return err
		}
	}
	switch call.op {
	case "SendMessageBatch":
		var in struct {
			Entries []struct {
				Id                string
				MessageAttributes map[string]struct{ StringValue string }
			}
		}
		var out struct{ Successful []struct{ Id string } }
		_ = json.Unmarshal(call.body, &in)
		_ = json.Unmarshal(b, &out)
		p.mu.Lock()
		for _, s := range out.Successful {
			for _, e := range in.Entries {
				if e.Id == s.Id {
					p.published[e.MessageAttributes[outbox.EventIDAttribute].StringValue]++
				}
			}
		}
		p.mu.Unlock()
		if tr := p.spring("publish"); tr != nil {
			<-tr.release
			return errKilled
		}
	case "ReceiveMessage":
		var out struct {
			Messages []struct{ ReceiptHandle, Body string }
		}
		_ = json.Unmarshal(b, &out)
		p.mu.Lock()
		for _, m := range out.Messages {
			var ev struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal([]byte(m.Body), &ev)
			p.received[ev.EventID]++
			p.pending[m.ReceiptHandle] = true
		}
		p.mu.Unlock()
		if len(out.Messages) > 0 {
			p.spring("receive")
		}
	case "DeleteMessage":
		var in struct{ ReceiptHandle string }
		_ = json.Unmarshal(call.body, &in)
		p.mu.Lock()
		p.deletes++
		delete(p.pending, in.ReceiptHandle)
		p.mu.Unlock()
	case "DeleteMessageBatch":
		var in struct {
			Entries []struct{ Id, ReceiptHandle string }
		}
		var out struct{ Successful []struct{ Id string } }
		_ = json.Unmarshal(call.body, &in)
		_ = json.Unmarshal(b, &out)
		p.mu.Lock()
		for _, s := range out.Successful {
			for _, e := range in.Entries {
				if e.Id == s.Id {
					p.deletes++
					delete(p.pending, e.ReceiptHandle)
				}
			}
		}
		p.mu.Unlock()
	}
	return nil
}

// arm sets the trap for op, sprung only while when holds; the killer waits on its hit channel and closes release once the
// process is dead.
func (p *sqsTap) arm(op string, when func() bool) *trap {
	tr := &trap{op: op, when: when, hit: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.trap = tr
	p.mu.Unlock()
	return tr
}

// disarm removes tr if it has not been sprung; false when it has.
func (p *sqsTap) disarm(tr *trap) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trap == tr {
		p.trap = nil
		return true
	}
	return false
}

func (p *sqsTap) spring(op string) *trap {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.trap
	if tr == nil || tr.op != op || !tr.when() {
		return nil
	}
	p.trap = nil
	close(tr.hit)
	return tr
}

// deliveriesInFlight is the number of deliveries the running worker received and has not
// deleted.
func (p *sqsTap) deliveriesInFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// forgetDeliveries drops the deliveries of a killed worker from the count in flight.
func (p *sqsTap) forgetDeliveries() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.pending)
}

func (p *sqsTap) publishedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.published {
		n += c
	}
	return n
}

type tapCounts struct {
	published, received map[string]int
	deletes             int
}

func (p *sqsTap) counts() tapCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := tapCounts{published: map[string]int{}, received: map[string]int{}, deletes: p.deletes}
	for k, v := range p.published {
		c.published[k] = v
	}
	for k, v := range p.received {
		c.received[k] = v
	}
	return c
}

func (c tapCounts) publishedCopies() int {
	n := 0
	for _, v := range c.published {
		n += v
	}
	return n
}

func (c tapCounts) receivedTotal() int {
	n := 0
	for _, v := range c.received {
		n += v
	}
	return n
}

// workerEnv gives a worker process a metrics server of its own (METRICS_ADDR).
func workerEnv(t *testing.T) []string { return []string{"METRICS_ADDR=" + freeAddr(t)} }

// scrapeWorker reads a worker process's counters from its /metrics: processed, duplicates.
func scrapeWorker(ctx context.Context, p *chainProc) map[string]int {
	out := map[string]int{}
	var addr string
	for _, kv := range p.cmd.Env {
		if v, ok := strings.CutPrefix(kv, "METRICS_ADDR="); ok {
			addr = v
		}
	}
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

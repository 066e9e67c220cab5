package reliability

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The postgres-failover scenario: the warehouse example (its real binary, at its defaults) as
// worker processes that are SIGKILLed and restarted all along, while PostgreSQL (a throwaway
// cluster of the scenario's own) is restarted with -m immediate and then held down. Workers
// started while it is down must wait for it, not exit; the messages in hand must not burn their
// receive counts; every order gets one pick task, only the poison reaches the DLQ, and the time
// from each return of the database to the next pick task is reported.

// failoverPlan is what a run of the scenario does to PostgreSQL: restarts (-m immediate, started
// again at once), then one outage held for hold.
type failoverPlan struct {
	restarts int
	hold     time.Duration
}

// planFor is the plan at size s: the full run (two restarts and 30 s down, as issue 45 asks)
// from 1,000 events up, a short one (one restart, 8 s down) below, for `make test`.
func planFor(s Size) failoverPlan {
	if s.Messages >= 1000 {
		return failoverPlan{restarts: 2, hold: 30 * time.Second}
	}
	return failoverPlan{restarts: 1, hold: 8 * time.Second}
}

// failoverPoison is the number of poison events (an OrderPaid without order_id): each must end
// in the DLQ, and nothing else.
const failoverPoison = 12

// warehouseFleet is the run's worker processes: the warehouse binary, SIGKILLed and restarted.
type warehouseFleet struct {
	bin   string
	procs *Procs
	mu    sync.Mutex
	live  []*Proc
	n     int      // incarnations started
	kills int      // SIGKILLs sent
	exits []string // processes that exited by themselves: what they said last
}

func (f *warehouseFleet) start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.procs.Start(fmt.Sprintf("warehouse-%d", f.n), exec.Command(f.bin))
	if err != nil {
		return err
	}
	f.n++
	f.live = append(f.live, p)
	return nil
}

// reap notes the processes that exited by themselves and starts one in the place of each, as
// ECS would.
func (f *warehouseFleet) reap() error {
	f.mu.Lock()
	var gone int
	f.live = slices.DeleteFunc(f.live, func(p *Proc) bool {
		done, err := p.Exited()
		if done {
			f.exits = append(f.exits, fmt.Sprintf("%s: %v: %s", p.ID, err, tail(p.Output(), 600)))
			gone++
		}
		return done
	})
	f.mu.Unlock()
	for range gone {
		if err := f.start(); err != nil {
			return err
		}
	}
	return nil
}

// killOne SIGKILLs a random live process and starts another in its place.
func (f *warehouseFleet) killOne() error {
	if err := f.reap(); err != nil {
		return err
	}
	f.mu.Lock()
	if len(f.live) == 0 {
		f.mu.Unlock()
		return f.start()
	}
	i := rand.IntN(len(f.live))
	p := f.live[i]
	f.live = slices.Delete(f.live, i, i+1)
	f.kills++
	f.mu.Unlock()
	p.Kill()
	return f.start()
}

// stop SIGTERMs the live processes and returns those that did not exit 0.
func (f *warehouseFleet) stop() []string {
	f.mu.Lock()
	live := f.live
	f.live = nil
	f.mu.Unlock()
	var bad []string
	for _, p := range live {
		if done, err := p.Exited(); done {
			f.exits = append(f.exits, fmt.Sprintf("%s: %v: %s", p.ID, err, tail(p.Output(), 600)))
			continue
		}
		if err := p.Term(time.Minute); err != nil {
			bad = append(bad, fmt.Sprintf("%s at SIGTERM: %v: %s", p.ID, err, tail(p.Output(), 600)))
		}
	}
	return bad
}

// WarehouseBinary builds the warehouse example (examples/warehouse) into dir and returns its path.
func WarehouseBinary(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", "github.com/sqsinbox/sqsinbox/examples/warehouse").Output()
	if err != nil {
		return "", fmt.Errorf("reliability: find the warehouse example: %w", err)
	}
	return BuildProgram(ctx, strings.TrimSpace(string(out)), dir)
}

// orderPaid is the body of the warehouse's event; a poison one has no order id.
func orderPaid(id, order string) string {
	b, _ := json.Marshal(map[string]any{"id": id, "order_id": order, "customer_id": "cus_1", "amount": 100, "currency": "EUR"})
	return string(b)
}

func runFailover(ctx context.Context, e *Env, s Size) (*Report, error) {
	began := time.Now()
	plan := planFor(s)
	db, err := ownedCluster(ctx, "relfailover")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	dir, err := os.MkdirTemp(e.Dir, "failover-")
	if err != nil {
		return nil, err
	}
	bin, err := WarehouseBinary(ctx, dir)
	if err != nil {
		return nil, err
	}
	q, err := e.SQS.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "failover", VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 5})
	if err != nil {
		return nil, err
	}
	procs := &Procs{Dir: dir, Env: []string{"DATABASE_URL=" + db.URL, "QUEUE_URL=" + q.URL, "LOG_LEVEL=warn"}}
	defer procs.KillAll()
	mig, err := procs.Start("migrate", exec.Command(bin, "migrate"))
	if err != nil {
		return nil, err
	}
	if done, err := mig.Wait(2 * time.Minute); !done || err != nil {
		return nil, fmt.Errorf("warehouse migrate: %w: %s", cmp.Or(err, errors.New("not done within 2 minutes")), mig.Tail(2000))
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	workers := max(3, s.Workers)
	fleet := &warehouseFleet{bin: bin, procs: procs}
	for range workers {
		if err := fleet.start(); err != nil {
			return nil, err
		}
	}

	// The events: every tenth sent twice, the poison mixed in, sent in chunks over the run so
	// that work is under way through every outage.
	run := randHex(4)
	var orders []string
	var msgs []sqstest.Message
	for i := range s.Messages {
		id, order := fmt.Sprintf("evt_%s_%d", run, i), fmt.Sprintf("ord_%s_%d", run, i)
		orders = append(orders, order)
		msgs = append(msgs, sqstest.Message{Body: orderPaid(id, order)})
		if i%10 == 0 {
			msgs = append(msgs, sqstest.Message{Body: orderPaid(id, order)})
		}
	}
	for i := range failoverPoison {
		msgs = append(msgs, sqstest.Message{Body: orderPaid(fmt.Sprintf("evt_%s_poison_%d", run, i), "")})
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	spread := time.Duration(plan.restarts)*6*time.Second + plan.hold + 10*time.Second
	sent := make(chan error, 1)
	go func() {
		const chunks = 20
		for c := range chunks {
			part := msgs[c*len(msgs)/chunks : (c+1)*len(msgs)/chunks]
			if err := sqstest.Send(ctx, e.SQS.Client(), q.URL, part); err != nil {
				sent <- err
				return
			}
			if err := sleep(ctx, spread/chunks); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()

	// The killer: a SIGKILL every 1.5-4 s (a fault parameter, not a synchronisation), each
	// followed by a new process, until the outages are over.
	killCtx, stopKilling := context.WithCancel(ctx)
	killed := make(chan error, 1)
	go func() {
		for {
			if err := sleep(killCtx, time.Duration(1500+rand.IntN(2500))*time.Millisecond); err != nil {
				killed <- nil
				return
			}
			if err := fleet.killOne(); err != nil {
				killed <- err
				return
			}
		}
	}()
	defer stopKilling()

	var notes, checks []string
	var resumes []time.Duration
	// outage stops PostgreSQL for down (0: a restart), starts it again, and measures the time
	// to the next pick task.
	outage := func(down time.Duration) error {
		before, err := pickTasks(ctx, pool)
		if err != nil {
			return err
		}
		if err := db.Stop("immediate"); err != nil {
			return err
		}
		if down > 0 {
			// A worker started during the outage must wait for the database.
			if err := fleet.killOne(); err != nil {
				return err
			}
			if err := sleep(ctx, down); err != nil {
				return err
			}
		}
		if err := db.StartAgain(); err != nil {
			return err
		}
		up := time.Now()
		var after int
		if !sqstest.PollUntil(ctx, s.Wait(), func() bool {
			after, err = pickTasks(ctx, pool)
			return err == nil && after > before
		}) {
			return fmt.Errorf("no pick task within %v of the database's return (%d before)", s.Wait(), before)
		}
		resumes = append(resumes, time.Since(up))
		notes = append(notes, fmt.Sprintf("stop -m immediate, down %v: the next pick task %v after the database was back",
			down.Round(time.Second), time.Since(up).Round(10*time.Millisecond)))
		return nil
	}
	gap := func() error { return sleep(ctx, time.Duration(3000+rand.IntN(2000))*time.Millisecond) }
	for range plan.restarts {
		if err := gap(); err != nil {
			return nil, err
		}
		if err := outage(0); err != nil {
			return nil, err
		}
	}
	if err := gap(); err != nil {
		return nil, err
	}
	if err := outage(plan.hold); err != nil {
		return nil, err
	}
	stopKilling()
	if err := <-killed; err != nil {
		return nil, err
	}
	if err := <-sent; err != nil {
		return nil, err
	}
	if err := fleet.reap(); err != nil {
		return nil, err
	}

	// The drain: every order has a pick task, and the poison is in the DLQ.
	rep := &Report{Scenario: "postgres-failover", Messages: len(msgs), Workers: workers, Keys: len(orders),
		SentOK: len(msgs), PoisonSent: failoverPoison}
	var counts map[string]int
	if !sqstest.PollUntil(ctx, s.Wait(), func() bool {
		counts, err = warehouse.PickTasks(ctx, pool, orders)
		if err != nil {
			return false
		}
		for _, o := range orders {
			if counts[o] == 0 {
				return false
			}
		}
		n, err := sqstest.Count(ctx, e.SQS.Client(), q.DLQURL)
		return err == nil && n >= failoverPoison
	}) {
		checks = append(checks, fmt.Sprintf("the queue did not drain within %v", s.Wait()))
	}
	checks = append(checks, fleet.stop()...)
	if counts, err = warehouse.PickTasks(ctx, pool, orders); err != nil {
		return nil, err
	}
	for _, o := range orders {
		switch n := counts[o]; {
		case n == 0:
			rep.Lost++
			if len(rep.Examples) < 5 {
				rep.Examples = append(rep.Examples, "no pick task: "+o)
			}
		case n > 1:
			rep.Duplicated++
			rep.ExtraEffects += n - 1
			if len(rep.Examples) < 5 {
				rep.Examples = append(rep.Examples, fmt.Sprintf("%d pick tasks: %s", n, o))
			}
		}
		if counts[o] > 0 {
			rep.Effected++
		}
	}
	good, poison, err := readFailoverDLQ(ctx, e.SQS.Client(), q.DLQURL)
	if err != nil {
		return nil, err
	}
	rep.GoodInDLQ, rep.PoisonInDLQ = good, poison
	if good > 0 {
		checks = append(checks, fmt.Sprintf("%d good messages in the DLQ: the outages burned their receive counts", good))
	}
	if poison != failoverPoison {
		checks = append(checks, fmt.Sprintf("%d of %d poison messages in the DLQ", poison, failoverPoison))
	}
	if len(fleet.exits) > 0 {
		checks = append(checks, fmt.Sprintf("%d worker processes exited by themselves; first: %s", len(fleet.exits), fleet.exits[0]))
	}
	slices.Sort(resumes)
	notes = append(notes, fmt.Sprintf("%d SIGKILLs, %d processes started, %d self-exits; resume after each return of the database: %v (longest %v)",
		fleet.kills, fleet.n, len(fleet.exits), resumes, resumes[len(resumes)-1].Round(10*time.Millisecond)))
	rep.Checks, rep.Notes, rep.Duration = checks, notes, time.Since(began)
	return rep, nil
}

// pickTasks counts the warehouse's pick tasks.
func pickTasks(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM warehouse.pick_tasks`).Scan(&n)
	return n, err
}

// readFailoverDLQ receives every message of the DLQ (leaving them invisible) and counts the good
// ones (with an order id) and the poison.
func readFailoverDLQ(ctx context.Context, c *sqs.Client, url string) (good, poison int, err error) {
	seen := map[string]bool{}
	for empty := 0; empty < 3; {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			VisibilityTimeout: 300, WaitTimeSeconds: 1})
		if err != nil {
			return 0, 0, fmt.Errorf("reliability: read the DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			var ev struct {
				OrderID string `json:"order_id"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ev); err != nil {
				return 0, 0, errors.New("reliability: a DLQ message is no OrderPaid: " + aws.ToString(m.Body))
			}
			if ev.OrderID == "" {
				poison++
			} else {
				good++
			}
		}
	}
	return good, poison, nil
}

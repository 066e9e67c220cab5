package inboxhandler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// check asks h for path and returns the status and the State it reported.
func check(t *testing.T, h http.Handler, path string) (int, worker.State) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var st worker.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body)
	}
	return rec.Code, st
}

// TestHealthThroughADatabaseOutage (GoAws or fauxqs, and a throwaway PostgreSQL cluster of its
// own that the test stops and starts): /livez and /readyz before start, running, through a
// database outage (paused: alive but not ready) and its recovery, and after stop.
func TestHealthThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg, err := pgtest.StartOwned(ctx, "health")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib := newInbox(t, pool, "", nil)
	h, err := inboxhandler.New(ib, "warehouse", nil, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		key, _, _ := inbox.EventKey(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "health", MaxReceiveCount: 100, VisibilityTimeout: 2 * time.Second})
	w, err := worker.New(srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: h,
		Logger: workertest.Logger(t), Backoff: func(int) time.Duration { return time.Second }})
	if err != nil {
		t.Fatal(err)
	}
	hh := worker.HealthHandler(w, &worker.HealthConfig{MaxPause: time.Second})
	expect := func(what string, live, ready int) worker.State {
		t.Helper()
		lc, st := check(t, hh, "/livez")
		rc, _ := check(t, hh, "/readyz")
		if lc != live || rc != ready {
			t.Fatalf("%s: /livez %d, /readyz %d; want %d, %d (state %+v)", what, lc, rc, live, ready, st)
		}
		return st
	}
	expect("before Start", 200, 503)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(ids ...string) {
		t.Helper()
		var msgs []sqstest.Message
		for _, id := range ids {
			msgs = append(msgs, sqstest.Message{Body: fmt.Sprintf(`{"id":%q}`, id)})
		}
		if err := sqstest.Send(ctx, srv.Client(), q.URL, msgs); err != nil {
			t.Fatal(err)
		}
	}
	send("evt_1")
	sqstest.WaitFor(t, 30*time.Second, "the first event committed", func() (bool, string) {
		return !w.State().LastCommit.IsZero(), ""
	})
	st := expect("running", 200, 200)
	if st.Phase != "running" || st.LastReceive.IsZero() {
		t.Errorf("running state %+v", st)
	}

	if err := pg.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	send("evt_2", "evt_3")
	sqstest.WaitFor(t, 60*time.Second, "the pollers paused for longer than MaxPause", func() (bool, string) {
		st := w.State()
		return st.Paused && time.Since(st.PausedSince) > 1500*time.Millisecond, fmt.Sprintf("%+v", st)
	})
	st = expect("database down", 200, 503)
	if st.PauseReason == "" {
		t.Error("no pause reason")
	}

	if err := pg.StartAgain(); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitFor(t, 90*time.Second, "the pause to end and every event to commit", func() (bool, string) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
			return false, err.Error()
		}
		return !w.State().Paused && n == 3, fmt.Sprintf("%d effects", n)
	})
	expect("database back", 200, 200)

	workertest.Stop(t, w)
	if st := expect("stopped", 503, 503); st.Phase != "stopped" {
		t.Errorf("phase %q after Stop", st.Phase)
	}
}

// TestLiveness: a running worker with no sign of life for longer than the timeout is not live;
// a paused one is live but, past the bound, not ready. (No server.)
func TestLiveness(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name        string
		st          worker.State
		live, ready bool
	}{
		{"new", worker.State{Phase: "new"}, true, false},
		{"running", worker.State{Phase: "running", LastProgress: now.Add(-time.Second)}, true, true},
		{"wedged", worker.State{Phase: "running", LastProgress: now.Add(-3 * time.Minute)}, false, true},
		{"paused briefly", worker.State{Phase: "running", LastProgress: now, Paused: true, PausedSince: now.Add(-10 * time.Second)}, true, true},
		{"paused long", worker.State{Phase: "running", LastProgress: now, Paused: true, PausedSince: now.Add(-time.Minute)}, true, false},
		{"stopping", worker.State{Phase: "stopping", LastProgress: now}, true, false},
		{"stopped", worker.State{Phase: "stopped", LastProgress: now}, false, false},
	} {
		if got := worker.Live(tc.st, worker.DefaultLivenessTimeout, now); got != tc.live {
			t.Errorf("%s: live %v, want %v", tc.name, got, tc.live)
		}
		if got := worker.Ready(tc.st, worker.DefaultMaxPause, now); got != tc.ready {
			t.Errorf("%s: ready %v, want %v", tc.name, got, tc.ready)
		}
	}
}

package workerapp_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// TestWaitsForDatabaseAtStart (PostgreSQL: a throwaway cluster of its own, stopped and started
// again; GoAws or fauxqs): a worker started while its database is down does not exit. It logs
// the wait once, serves /livez (200) and /readyz (503, "waiting_for":"database"), and starts
// once the database is back, then processes a message.
func TestWaitsForDatabaseAtStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgtest.StartOwned(ctx, "appwait")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	q := srv.Queue(t, "dbwait")
	addr := closedPort(t)
	getenv := srv.Getenv(q.URL, "DATABASE_URL="+db.URL, "HEALTH_ADDR="+addr)
	var calls atomic.Int32
	counting := workerapp.Spec{Name: "dbwait", Handler: func(context.Context, *workerapp.Deps) (worker.Handler, error) {
		return worker.HandlerFunc(func(context.Context, *worker.Message) error { calls.Add(1); return nil }), nil
	}}
	if err := workerapp.Run(ctx, counting, workerapp.Options{Args: []string{"migrate"}, Getenv: getenv, Logger: exampletest.Logger(t)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	logs := &sqstest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the worker's log:\n%s", logs.String())
		}
	})
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- workerapp.Run(runCtx, counting, workerapp.Options{Getenv: getenv, Logger: log,
			Worker:  worker.Config{WaitTime: time.Second},
			Started: func(*worker.Worker) { close(started) }})
	}()

	// It waits: alive and not ready, and it stays so across several attempts (a worker on the
	// old code had exited with "unreachable" by then).
	sqstest.WaitFor(t, time.Minute, "the waiting worker's health checks", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the worker exited while the database was down: %v", err)
		default:
		}
		live, _ := get(addr, "/livez")
		ready, body := get(addr, "/readyz")
		return live == http.StatusOK && ready == http.StatusServiceUnavailable && strings.Contains(body, `"waiting_for":"database"`) &&
				strings.Count(logs.String(), "the database still cannot be reached") >= 3,
			"livez " + http.StatusText(live) + ", readyz " + http.StatusText(ready) + ": " + body
	})
	select {
	case err := <-done:
		t.Fatalf("the worker exited while the database was down: %v", err)
	case <-started:
		t.Fatal("the worker started while the database was down")
	default:
	}
	if err := db.StartAgain(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	select {
	case <-started:
		t.Logf("the worker started %v after the database was back", time.Since(up).Round(time.Millisecond))
	case err := <-done:
		t.Fatalf("the worker exited after the database came back: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker did not start within 2 minutes of the database's return")
	}
	srv.Send(t, q.URL, []sqstest.Message{{Body: `{"id":"1"}`}})
	sqstest.WaitFor(t, time.Minute, "the message to be handled", func() (bool, string) {
		return calls.Load() >= 1, "not yet"
	})
	if ready, body := get(addr, "/readyz"); ready != http.StatusOK {
		t.Errorf("/readyz of the running worker: %d %s", ready, body)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("stop: %v", err)
	}
	if n := strings.Count(logs.String(), "waiting for it (DATABASE_WAIT)"); n != 1 {
		t.Errorf("the wait was logged at warn level %d times, want once", n)
	}
	if n := strings.Count(logs.String(), "the database is reachable; starting"); n != 1 {
		t.Errorf("the end of the wait was logged %d times, want once", n)
	}
}

// TestDatabaseWaitLimit (no database, no SQS server): a database that cannot be reached within
// DATABASE_WAIT is reported as unreachable, naming the setting; a refusal is reported at once
// (TestDatabaseRefusalIsReported), and a DATABASE_WAIT that is not a duration is refused naming it.
func TestDatabaseWaitLimit(t *testing.T) {
	t.Parallel()
	url := "postgres://app@" + closedPort(t) + "/app"
	for _, args := range [][]string{nil, {"migrate"}} {
		vars := map[string]string{"DATABASE_URL": url, "DATABASE_WAIT": "1500ms", "QUEUE_URL": "http://127.0.0.1:1/000000000000/none"}
		begun := time.Now()
		err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: args, Getenv: env(vars), Logger: exampletest.Logger(t)})
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "DATABASE_WAIT=1.5s") {
			t.Errorf("args %q: got %v, want the database unreachable after DATABASE_WAIT=1.5s", args, err)
		}
		if waited := time.Since(begun); waited < 1500*time.Millisecond {
			t.Errorf("args %q: gave up after %v, before DATABASE_WAIT", args, waited)
		}
		vars["DATABASE_WAIT"] = "soon"
		err = workerapp.Run(t.Context(), spec, workerapp.Options{Args: args, Getenv: env(vars), Logger: exampletest.Logger(t)})
		if err == nil || !strings.Contains(err.Error(), `DATABASE_WAIT="soon"`) {
			t.Errorf("args %q: DATABASE_WAIT=soon gave %v, want an error naming it", args, err)
		}
	}
}

// get returns the status and body of http://addr+path (0 when nothing answers).
func get(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

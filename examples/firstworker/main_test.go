package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/ecstask"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// The tests run the built program against real servers: PostgreSQL from pgtest (a throwaway
// cluster, or TEST_DATABASE_URL) and GoAws v0.5.4 from sqstest (fauxqs with
// SQSINBOX_TEST_SQS=fauxqs, or the server AWS_ENDPOINT_URL_SQS names).
var srv exampletest.Servers

func TestMain(m *testing.M) { exampletest.Main(m, "firstworker", &srv) }

// binary builds the program into a directory of t's and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firstworker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// baseEnv is what every container gets besides its own environment: PATH and HOME, and the
// harness's AWS settings (its endpoint and test credentials), in place of ECS's task role.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "HOME" || strings.HasPrefix(k, "AWS_") {
			env = append(env, kv)
		}
	}
	return env
}

// warnLine is a log line at WARN or ERROR (workerapp logs JSON).
var warnLine = regexp.MustCompile(`(?m)^.*"level":"(WARN|ERROR)".*$`)

// TestFirstWorkerAsECSRunsIt runs the program as terraform/examples/ecs-worker's task definition
// says, reading the containers from that Terraform (the variables at their defaults): the
// migrate container's entry point and command, then, since the worker container depends on
// migrate's SUCCESS, the worker container's, with the environment each is given (what only an
// apply knows, the queue's URL and the DATABASE_URL secret, from the test's servers; the health
// address on a free port), and the worker container's health check while it runs. The program
// stands in for worker_command's path in the image. The worker picks each good order once (one
// sent three times) and leaves the bad event to the retry-then-DLQ way; the health check exits
// 0; SIGTERM stops the worker with exit status 0 within the stop budget; then the health check
// fails. Neither the migration nor the worker logs a warning, but for the bad event's failures.
// The worker settings the container's environment sets (CONCURRENCY, MAX_PER_GROUP,
// SHUTDOWN_TIMEOUT) are those of the worker's start line.
func TestFirstWorkerAsECSRunsIt(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	containers, err := ecstask.Read("../../terraform/examples/ecs-worker", "worker")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]ecstask.Container{}
	for _, c := range containers {
		byName[c.Name] = c
	}
	migrateC, workerC := byName["migrate"], byName["worker"]
	if migrateC.Name == "" || workerC.Name == "" || workerC.DependsOn["migrate"] != "SUCCESS" {
		t.Fatalf("the task definition has no migrate container that the worker container waits for: %+v", containers)
	}
	q := srv.Queue(t, "first")
	// argv is c's command with the image's program replaced by the one built; env, its
	// environment.
	argv := func(c ecstask.Container, args []string) []string {
		t.Helper()
		if len(args) == 0 || !strings.HasPrefix(args[0], "/") {
			t.Fatalf("container %s runs %q: want the program's absolute path first", c.Name, args)
		}
		return append([]string{bin}, args[1:]...)
	}
	env := func(c ecstask.Container) []string {
		t.Helper()
		out := baseEnv()
		for k, v := range c.Env {
			switch {
			case k == "HEALTH_ADDR" && v != nil:
				host, _, err := net.SplitHostPort(*v)
				if err != nil {
					t.Fatalf("container %s: HEALTH_ADDR %q: %v", c.Name, *v, err)
				}
				out = append(out, k+"="+net.JoinHostPort(host, freePort(t)))
			case v != nil:
				out = append(out, k+"="+*v)
			case k == "DATABASE_URL":
				out = append(out, k+"="+srv.DB.URL)
			case k == "QUEUE_URL":
				out = append(out, k+"="+q.URL)
			default:
				t.Fatalf("container %s: the test does not know what to give %s (known after an apply)", c.Name, k)
			}
		}
		return out
	}
	// Each container's environment, fixed for the task's life (the health check runs in the
	// worker's container).
	envs := map[string][]string{migrateC.Name: env(migrateC), workerC.Name: env(workerC)}
	run := func(c ecstask.Container, args []string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		a := argv(c, args)
		cmd := exec.CommandContext(ctx, a[0], a[1:]...)
		cmd.Env = envs[c.Name]
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(migrateC, migrateC.Argv())
	if err != nil {
		t.Fatalf("the migrate container (%q): %v\n%s", migrateC.Argv(), err, out)
	}
	if w := warnLine.FindAllString(out, -1); len(w) > 0 {
		t.Errorf("the migration logged warnings:\n%s", strings.Join(w, "\n"))
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	a := argv(workerC, workerC.Argv())
	worker := exec.CommandContext(ctx, a[0], a[1:]...)
	worker.Env = envs[workerC.Name]
	log := &sqstest.Buffer{}
	worker.Stdout, worker.Stderr = log, log
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	defer func() {
		_ = worker.Process.Kill()
		<-exited
	}()
	srv.Send(t, q.URL, []sqstest.Message{
		{Body: `{"id":"evt_1","order_id":"o-1"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_2","order_id":"o-2"}`},
		{Body: `{"id":"evt_3","order_id":"o-3"}`},
		{Body: `{"id":"evt_4"}`},
	})
	pool := srv.Pool(t)
	count := func(order string) int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks WHERE order_id = $1`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sqstest.WaitFor(t, time.Minute, "the three good orders picked, and the queue down to the bad event", func() (bool, string) {
		n, err := sqstest.Count(t.Context(), srv.SQS.Client(), q.URL)
		if err != nil {
			return false, err.Error()
		}
		return count("o-1") == 1 && count("o-2") == 1 && count("o-3") == 1 && n <= 1,
			fmt.Sprintf("pick tasks %d/%d/%d, %d messages left; output:\n%s", count("o-1"), count("o-2"), count("o-3"), n, log.String())
	})

	// The worker settings the task definition sets are the ones the worker runs with.
	for k, field := range map[string]string{"CONCURRENCY": `"concurrency":%s,`, "MAX_PER_GROUP": `"max_per_group":%s,`, "SHUTDOWN_TIMEOUT": `"shutdown_timeout":"%s"`} {
		v := workerC.Env[k]
		if v == nil {
			t.Errorf("the worker container sets no %s", k)
			continue
		}
		if want := fmt.Sprintf(field, *v); !strings.Contains(log.String(), want) {
			t.Errorf("the worker's start line does not have %s (%s=%s); output:\n%s", want, k, *v, log.String())
		}
	}

	if len(workerC.HealthCheck) < 2 || workerC.HealthCheck[0] != "CMD" {
		t.Fatalf("the worker container's health check is %q; want the CMD form", workerC.HealthCheck)
	}
	// The worker serves /livez once it runs; ECS allows startPeriod for that.
	sqstest.WaitFor(t, time.Minute, "the health check to pass", func() (bool, string) {
		out, err := run(workerC, workerC.HealthCheck[1:])
		return err == nil, fmt.Sprintf("%q: %v\n%s", workerC.HealthCheck[1:], err, out)
	})

	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the worker after SIGTERM: %v; output:\n%s", err, log.String())
		}
	case <-time.After(workerapp.StopTimeout + workerapp.HardStopTimeout):
		t.Fatalf("the worker did not stop within %v of SIGTERM; output:\n%s", workerapp.StopTimeout+workerapp.HardStopTimeout, log.String())
	}
	if out, err := run(workerC, workerC.HealthCheck[1:]); err == nil {
		t.Errorf("the health check passed with the worker stopped:\n%s", out)
	}
	var total int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 3 {
		t.Errorf("%d pick tasks; want 3, one per good order", total)
	}
	// The one warning due is the bad event's failure, each time it is received.
	var warned []string
	for _, w := range warnLine.FindAllString(log.String(), -1) {
		if !strings.Contains(w, "order_id is missing") {
			warned = append(warned, w)
		}
	}
	if len(warned) > 0 {
		t.Errorf("the worker logged warnings:\n%s", strings.Join(warned, "\n"))
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestRefusesWithoutDatabase runs the program: with neither DATABASE_URL nor a PG* variable that
// says where the database is, it exits 1 naming them, instead of connecting to the local
// socket's default database. No server is needed: the queue's endpoint is closed.
func TestRefusesWithoutDatabase(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"nothing set", nil},
		{"port, user and password say nothing of where", []string{"PGPORT=5432", "PGUSER=app", "PGPASSWORD=secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "PG") && !strings.HasPrefix(k, "AWS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, "QUEUE_URL=http://127.0.0.1:1/000000000000/none",
				"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1", "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
			cmd.Env = append(cmd.Env, tc.extra...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the program: %v, want exit status 1; output:\n%s", err, out)
			}
			for _, name := range []string{"DATABASE_URL", "PGHOST", "PGDATABASE", "PGSERVICE"} {
				if !strings.Contains(string(out), name) {
					t.Errorf("the message does not name %s:\n%s", name, out)
				}
			}
		})
	}
}

// TestSettingsFromTheEnvironment runs the program (PostgreSQL from pgtest, the harness's SQS
// server: GoAws, or fauxqs on the second pass) with worker settings in its environment, as an
// ECS task definition sets them, and reads each back from the worker's `worker: started` line:
// the values the worker runs with. It then stops the worker with SIGTERM (exit status 0).
func TestSettingsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	q := srv.Queue(t, "settings")
	env := append(baseEnv(), "DATABASE_URL="+srv.DB.URL, "QUEUE_URL="+q.URL)
	migrate := exec.CommandContext(t.Context(), bin, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	settings := map[string]string{
		"CONCURRENCY": "3", "MAX_PER_GROUP": "2", "HANDLER_BATCH": "4", "PREFETCH": "5",
		"VISIBILITY_TIMEOUT": "40s", "HANDLER_TIMEOUT": "45s", "SHUTDOWN_TIMEOUT": "12s", "MAX_HOLD": "50s",
		"INBOX_RETENTION": "400h", // past the 14 days of the test queue's DLQ (its redelivery horizon)
	}
	// What each variable sets, as the start line shows it: JSON numbers, and durations as Go
	// duration strings.
	want := map[string]any{
		"concurrency": 3.0, "max_per_group": 2.0, "handler_batch": 4.0, "prefetch": 5.0,
		"visibility_timeout": "40s", "handler_timeout": "45s", "shutdown_timeout": "12s", "max_hold": "50s",
	}
	for k, v := range settings {
		env = append(env, k+"="+v)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env
	log := &sqstest.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	var started map[string]any
	sqstest.WaitFor(t, 2*time.Minute, "the worker's start line", func() (bool, string) {
		for line := range strings.Lines(log.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "worker: started" {
				started = m
				return true, ""
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the worker exited (%v) before it started; output:\n%s", err, log.String())
		default:
		}
		return false, log.String()
	})
	for k, v := range want {
		if started[k] != v {
			t.Errorf("the start line has %s=%v (%T), want %v from the environment; line: %v", k, started[k], started[k], v, started)
		}
	}
	if h, _ := started["handler"].(map[string]any); h["inbox_retention"] != "400h0m0s" {
		t.Errorf("the start line's handler has inbox_retention=%v, want 400h0m0s from INBOX_RETENTION; line: %v", h["inbox_retention"], started)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("the worker after SIGTERM: %v; output:\n%s", err, log.String())
	}
	exited <- nil
}

// TestBadSettingRefused runs the program with a worker setting it must refuse: it exits with
// status 1 before connecting anywhere (the database's and the queue's addresses are closed ports),
// naming the variable and quoting its value.
func TestBadSettingRefused(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	closed := "127.0.0.1:" + freePort(t)
	for _, tc := range []struct{ env, want string }{
		{"CONCURRENCY=abc", `CONCURRENCY="abc": not a whole number`},
		{"CONCURRENCY=0", `CONCURRENCY="0": must be at least 1`},
		{"MAX_PER_GROUP=-1", `MAX_PER_GROUP="-1": must be at least 0`},
		{"HANDLER_BATCH=21", `HANDLER_BATCH="21": must be 1 to 20`},
		{"VISIBILITY_TIMEOUT=30", `VISIBILITY_TIMEOUT="30": a duration needs a unit: 30s`},
		{"VISIBILITY_TIMEOUT=1500ms", `VISIBILITY_TIMEOUT="1500ms": must be whole seconds`},
		{"HANDLER_TIMEOUT=13h", `HANDLER_TIMEOUT="13h": must be at most 12h0m0s`},
		{"SHUTDOWN_TIMEOUT=soon", `SHUTDOWN_TIMEOUT="soon": not a duration`},
		{"INBOX_RETENTION=28", `INBOX_RETENTION="28": a duration needs a unit: 28s`},
		{"INBOX_RETENTION=-1h", `INBOX_RETENTION="-1h": must be positive`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(baseEnv(), "DATABASE_URL=postgres://app@"+closed+"/app?sslmode=disable",
				"QUEUE_URL=http://"+closed+"/000000000000/none", tc.env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the program: %v, want exit status 1; output:\n%s", err, out)
			}
			// The log is JSON: the quotes of the value are escaped in it.
			if got := strings.ReplaceAll(string(out), `\"`, `"`); !strings.Contains(got, tc.want) {
				t.Errorf("the output does not say %s:\n%s", tc.want, out)
			}
			if strings.Contains(string(out), "unreachable") {
				t.Errorf("the program tried the database before refusing the setting:\n%s", out)
			}
		})
	}
}

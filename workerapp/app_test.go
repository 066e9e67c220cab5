package workerapp_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// The tests run workerapp.Run as a program's main does, against real servers (exampletest).
var srv exampletest.Servers

func TestMain(m *testing.M) { exampletest.Main(m, "app", &srv) }

// spec is a program whose handler does nothing.
var spec = workerapp.Spec{Name: "apptest", Handler: func(context.Context, *workerapp.Deps) (worker.Handler, error) {
	return worker.HandlerFunc(func(context.Context, *worker.Message) error { return nil }), nil
}}

// env returns a Getenv that sees only vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestRefusesWithoutDatabase: with neither DATABASE_URL nor a PG* variable that says where the
// database is, the program refuses to start and says what to set, before it connects anywhere.
func TestRefusesWithoutDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"nothing set", nil},
		{"only the queue", map[string]string{"QUEUE_URL": "http://127.0.0.1:1/000000000000/q"}},
		{"port, user and password say nothing of where", map[string]string{"PGPORT": "5432", "PGUSER": "app", "PGPASSWORD": "secret"}},
		{"a service file without a service", map[string]string{"PGSERVICEFILE": "/etc/pg_service.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{nil, {"migrate"}} {
				err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: args, Getenv: env(tc.vars), Logger: exampletest.Logger(t)})
				if !errors.Is(err, workerapp.ErrNoDatabase) {
					t.Fatalf("args %q: got %v, want workerapp.ErrNoDatabase", args, err)
				}
				for _, name := range []string{"DATABASE_URL", "PGHOST", "PGDATABASE", "PGSERVICE"} {
					if !strings.Contains(err.Error(), name) {
						t.Errorf("args %q: the error does not name %s: %v", args, name, err)
					}
				}
			}
		})
	}
}

// TestPGVariablesSayWhere: without DATABASE_URL, the libpq variables are enough.
func TestPGVariablesSayWhere(t *testing.T) {
	exampletest.SetPGEnv(t, srv.DB.URL)
	err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"migrate"}, Getenv: os.Getenv, Logger: exampletest.Logger(t)})
	if err != nil {
		t.Fatalf("migrate with PGHOST, PGPORT, PGDATABASE, PGUSER: %v", err)
	}
}

// TestDatabaseRefusalIsReported: a server that refuses the connection is reported with what
// PostgreSQL said and its SQLSTATE, naming the database, at start, before the queue is looked
// at; a server that does not answer is reported as unreachable.
func TestDatabaseRefusalIsReported(t *testing.T) {
	t.Parallel()
	pwURL := passwordServer(t)
	u, err := url.Parse(srv.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(u *url.URL)) string {
		c := *u
		f(&c)
		return c.String()
	}
	closed := closedPort(t)
	for _, tc := range []struct {
		name, url string
		code      string // "" means no answer from a server
		says      string
	}{
		{"missing database", with(func(u *url.URL) { u.Path = "/no_such_db" }), "3D000", `database "no_such_db" does not exist`},
		{"unknown role", with(func(u *url.URL) { u.User = url.User("no_such_role") }), "28000", `role "no_such_role" does not exist`},
		{"wrong password", pwURL, "28P01", `password authentication failed for user "pwcheck"`},
		{"nothing listens", with(func(u *url.URL) { u.Host = closed }), "", "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A queue that does not exist: the database is checked first, so its error is the one
			// reported.
			// DATABASE_WAIT short: a server that does not answer is waited for that long.
			vars := map[string]string{"DATABASE_URL": tc.url, "DATABASE_WAIT": "1s", "QUEUE_URL": "http://127.0.0.1:1/000000000000/none"}
			for _, args := range [][]string{nil, {"migrate"}} {
				err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: args, Getenv: env(vars), Logger: exampletest.Logger(t)})
				if err == nil {
					t.Fatalf("args %q: started", args)
				}
				msg := err.Error()
				t.Logf("args %q: %s", args, msg)
				if !strings.Contains(msg, tc.says) {
					t.Errorf("args %q: the error does not say %q: %s", args, tc.says, msg)
				}
				var pgErr *pgconn.PgError
				if tc.code == "" {
					if errors.As(err, &pgErr) {
						t.Errorf("args %q: a PostgreSQL error from no server: %v", args, err)
					}
					continue
				}
				if !errors.As(err, &pgErr) || pgErr.Code != tc.code {
					t.Errorf("args %q: want a *pgconn.PgError with SQLSTATE %s: %v", args, tc.code, err)
				}
				if !strings.Contains(msg, "(SQLSTATE "+tc.code+")") || strings.Contains(msg, "unreachable") {
					t.Errorf("args %q: the error must give the SQLSTATE and not call the server unreachable: %s", args, msg)
				}
				if !strings.HasPrefix(msg, "database ") {
					t.Errorf("args %q: the error must start with the database it names: %s", args, msg)
				}
			}
		})
	}
}

// passwordServer returns the URL, with a wrong password, of a role that must give one. The
// shared test server trusts every local connection, so this runs on a throwaway cluster of its
// own whose pg_hba.conf asks that role for a SCRAM password.
func passwordServer(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	s, err := pgtest.StartOwned(ctx, "apppw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var hba string
	if err := conn.QueryRow(ctx, "SHOW hba_file").Scan(&hba); err != nil {
		t.Fatal(err)
	}
	// Only the server's own literal quoting: hba is a path the server gave.
	hbaLit := "'" + strings.ReplaceAll(hba, "'", "''") + "'"
	for _, q := range []string{
		`CREATE ROLE pwcheck LOGIN PASSWORD 'right'`,
		`COPY (VALUES ('host all pwcheck 127.0.0.1/32 scram-sha-256'), ('host all all 127.0.0.1/32 trust')) TO ` + hbaLit,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("pwcheck", "wrong")
	// The reload is asynchronous: wait until the server asks for the password.
	sqstest.WaitFor(t, 30*time.Second, "the server to ask pwcheck for a password", func() (bool, string) {
		c, err := pgx.Connect(ctx, u.String())
		if err == nil {
			_ = c.Close(ctx)
			return false, "connected without a password"
		}
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "28P01", err.Error()
	})
	return u.String()
}

// closedPort returns a local address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestMissingAWSCredentials: without credentials, the worker refuses to start and names the
// settings the SDK's default chain tried.
func TestMissingAWSCredentials(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-credentials"),
		"AWS_CONFIG_FILE":             filepath.Join(dir, "no-config"),
	}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_SHARED_CREDENTIALS_FILE": files["AWS_SHARED_CREDENTIALS_FILE"], "AWS_CONFIG_FILE": files["AWS_CONFIG_FILE"],
	} {
		t.Setenv(k, v) // the SDK reads the process's environment
	}
	q := srv.Queue(t, "creds")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := workerapp.Run(ctx, spec, workerapp.Options{Getenv: srv.Getenv(q.URL), Logger: exampletest.Logger(t)})
	if err == nil {
		t.Fatal("started without AWS credentials")
	}
	t.Log(err)
	for _, want := range []string{"no AWS credentials", "AWS_ACCESS_KEY_ID", `profile "default"`, files["AWS_SHARED_CREDENTIALS_FILE"],
		files["AWS_CONFIG_FILE"], "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"instance metadata service (disabled by AWS_EC2_METADATA_DISABLED)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// TestHealthcheckSubcommand (GoAws or fauxqs, and PostgreSQL): a running worker serves /livez and
// /readyz at HEALTH_ADDR, and `healthcheck` (ECS's container health check, no curl needed) exits
// 0 while it runs and fails once it has stopped.
func TestHealthcheckSubcommand(t *testing.T) {
	t.Parallel()
	srv.Migrate(t, spec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	q := srv.Queue(t, "health").URL
	getenv := srv.Getenv(q, "HEALTH_ADDR="+addr)
	r := srv.Start(t, spec, q, workerapp.Options{Getenv: getenv})
	if err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"healthcheck"}, Getenv: getenv}); err != nil {
		t.Fatalf("healthcheck of a running worker: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz of a running worker: %s", resp.Status)
	}
	r.Stop(t)
	if err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"healthcheck"}, Getenv: getenv}); err == nil {
		t.Error("healthcheck of a stopped worker succeeded")
	}
	err = workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"healthcheck"}, Getenv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "HEALTH_ADDR") {
		t.Errorf("healthcheck without an address = %v, want an error naming HEALTH_ADDR", err)
	}
}

// TestStopWhileStarting (GoAws or fauxqs, and PostgreSQL): a stop that comes while the worker is
// still starting (here: as the program builds its handler, before the queue is looked up) ends
// Run with nil, since nothing was processed, and the message waiting in the queue stays there
// for the next worker. An interrupted `migrate` still reports its error.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	srv.Migrate(t, spec)
	q := srv.Queue(t, "stopstart")
	srv.Send(t, q.URL, []sqstest.Message{{Body: `{"id":"1"}`}})
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	stopping := workerapp.Spec{Name: "stopstart", Handler: func(context.Context, *workerapp.Deps) (worker.Handler, error) {
		cancel() // SIGTERM arrives
		return worker.HandlerFunc(func(context.Context, *worker.Message) error { calls.Add(1); return nil }), nil
	}}
	if err := workerapp.Run(ctx, stopping, workerapp.Options{Getenv: srv.Getenv(q.URL), Logger: exampletest.Logger(t)}); err != nil {
		t.Fatalf("a worker stopped while starting returned %v, want nil", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the handler was never built: the stop did not come during start-up")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times in a worker stopped before it started", n)
	}
	if n, err := sqstest.Count(t.Context(), srv.SQS.Client(), q.URL); err != nil || n != 1 {
		t.Errorf("the queue holds %d messages (%v) after the stopped start, want the 1 sent", n, err)
	}
	err := workerapp.Run(ctx, spec, workerapp.Options{Args: []string{"migrate"}, Getenv: srv.Getenv(q.URL), Logger: exampletest.Logger(t)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("an interrupted migrate returned %v, want an error wrapping context.Canceled", err)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// The tests here that set environment variables (the SQS endpoint, the AWS credentials) are
// not parallel: Go runs them before any parallel test of the package resumes, so no other
// test sees their environment.

func TestHangingPostgreSQLTimesOutNamingIt(t *testing.T) {
	t.Parallel()
	addr := hangingServer(t)
	for _, cmd := range [][]string{{"stats"}, {"migrate", "status"}, {"purge", "--skip-queue-check"}} {
		t.Run(cmd[0], func(t *testing.T) {
			cli(t, "", append(cmd, "--timeout", "1s", "--database-url", "postgres://app@"+addr+"/app")...).
				mustFail(t, 1, "PostgreSQL at "+addr+" did not answer within 1s (--timeout)")
		})
	}
}

func TestHangingSQSTimesOutNamingIt(t *testing.T) {
	endpoint := "http://" + hangingServer(t)
	t.Setenv("AWS_ENDPOINT_URL_SQS", endpoint)
	for _, cmd := range [][]string{
		{"stats", "--no-db", "--queue", "warehouse"},
		{"send", "--queue", "warehouse"},
		{"redrive", "--from", "warehouse-dlq", "--to", "warehouse"},
		{"purge", "--queue", "warehouse", "--database-url", db.URL},
	} {
		t.Run(cmd[0], func(t *testing.T) {
			cli(t, `{"id":"evt_1"}`, append(cmd, "--timeout", "1s")...).
				mustFail(t, 1, "SQS at "+endpoint+" did not answer within 1s (--timeout)")
		})
	}
}

func TestDatabaseErrorsSayWhatPostgreSQLSaid(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	with := func(user *url.Userinfo, database string) string {
		v := *u
		v.User, v.Path = user, "/"+database
		return v.String()
	}
	suffix := randSuffix()
	cases := []struct{ name, url, want string }{
		{"missing database", with(url.User(u.User.Username()), "no_such_db_"+suffix),
			`: database "no_such_db_` + suffix + `" does not exist (SQLSTATE 3D000); check the database name`},
		{"missing role", with(url.User("no_such_role_"+suffix), u.Path[1:]),
			`: role "no_such_role_` + suffix + `" does not exist (SQLSTATE 28000)`},
	}
	if db.Owned() {
		cases = append(cases, struct{ name, url, want string }{"wrong password",
			with(url.UserPassword(passwordRole(t), "wrong-secretpw"), u.Path[1:]),
			`password authentication failed for user "` + passwordRole(t) + `" (SQLSTATE 28P01); check the user and password`})
	}
	for _, tc := range cases {
		r := cli(t, "", "stats", "--database-url", tc.url)
		line := lastLine(r.stderr)
		if r.code != 1 || !strings.HasPrefix(line, "sqsinbox stats: PostgreSQL at "+u.Host+": ") || !strings.Contains(line, tc.want) ||
			strings.Contains(line, "unreachable") || strings.Contains(line, "secretpw") {
			t.Errorf("%s: exit %d, %q; want 1 and PostgreSQL's own words: %q", tc.name, r.code, line, tc.want)
		}
	}
}

// passwordRole makes a role that must log in with a password on the harness's own cluster (its
// other users are trusted) and returns its name. The pg_hba.conf line names only this role.
func passwordRole(t *testing.T) string {
	t.Helper()
	const role = "cli_password_role"
	pwOnce.Do(func() { pwErr = setupPasswordRole(t.Context(), role) })
	if pwErr != nil {
		t.Fatal(pwErr)
	}
	return role
}

var (
	pwOnce sync.Once
	pwErr  error
)

func setupPasswordRole(ctx context.Context, role string) error {
	conn, err := pgx.Connect(ctx, db.AdminURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var hba string
	if err := conn.QueryRow(ctx, "SHOW hba_file").Scan(&hba); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'right-pw'"); err != nil {
		return err
	}
	old, err := os.ReadFile(hba)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("host all %s 0.0.0.0/0 scram-sha-256\nhost all %s ::/0 scram-sha-256\n", role, role)
	if err := os.WriteFile(hba, append([]byte(line), old...), 0o600); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	// The reload is asynchronous: wait until the server asks this role for its password.
	u, err := url.Parse(db.URL)
	if err != nil {
		return err
	}
	u.User = url.UserPassword(role, "wrong")
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, u.String())
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "28P01":
			return nil
		case err == nil:
			_ = c.Close(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not start asking %s for a password within 30 s: %w", role, err)
		}
		time.Sleep(50 * time.Millisecond) // a polling interval, not a synchronisation
	}
}

func TestNoAWSCredentialsNamesWhatWasTried(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		// No instance metadata service here: a closed port answers at once.
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1",
	} {
		t.Setenv(k, v)
	}
	r := cli(t, `{"id":"evt_1"}`, "send", "--queue", "warehouse")
	line := lastLine(r.stderr)
	for _, want := range []string{"no AWS credentials found", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "EC2 instance metadata"} {
		if r.code != 1 || !strings.Contains(line, want) {
			t.Fatalf("exit %d, %q; want 1 and %q", r.code, line, want)
		}
	}
	if strings.Contains(line, "operation error") || strings.Contains(line, "GetMetadata") {
		t.Fatalf("the SDK's chain leaks: %q", line)
	}
}

// TestPurgeRefusesAnUnreadableDeadLetterQueue: without the DLQ's retention the horizon is unknown.
func TestPurgeRefusesAnUnreadableDeadLetterQueue(t *testing.T) {
	dlqARN := "arn:aws:sqs:us-east-1:000000000000:orders-dlq"
	f := startSQSFault(t, map[string]map[string]string{
		"orders":     {"MessageRetentionPeriod": "345600", "RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":3}`},
		"orders-dlq": {"MessageRetentionPeriod": "1209600"},
	}, "orders-dlq")
	t.Setenv("AWS_ENDPOINT_URL_SQS", f.URL)
	_, dbArgs := setupPurge(t)
	r := cli(t, "", append([]string{"purge", "--queue", "orders"}, dbArgs...)...)
	r.mustFail(t, 1, "queue orders: the retention of its dead-letter queue "+dlqARN+" cannot be read (AccessDenied: User is not authorized",
		"purge is refused")
	if strings.Contains(r.stdout, "deleted") {
		t.Fatalf("purged despite the unknown horizon:\n%s", r.stdout)
	}
}

func TestRedriveWithoutMoveTasksSaysSo(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-movetask", MaxReceiveCount: 3})
	line := cli(t, "", "redrive", "--from", q.DLQURL, "--mode", "move-task").
		mustFail(t, 1, "does not support message move tasks (StartMessageMoveTask); use --mode copy")
	if strings.Contains(line, "deserializ") {
		t.Fatalf("the SDK's error leaks: %q", line)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "--version").mustOK(t)
	if v := strings.TrimSpace(r.stdout); !strings.HasPrefix(v, "sqsinbox ") || len(v) <= len("sqsinbox ") {
		t.Fatalf("--version printed %q", r.stdout)
	}
}

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// envRunMain makes the test binary run main instead of the tests.
const envRunMain = "FIRSTWORKER_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRefusesWithoutDatabase runs main in a process of its own: with neither DATABASE_URL nor a
// PG* variable that says where the database is, it exits 1 naming them, instead of connecting
// to the local socket's default database. No server is needed: the queue's endpoint is closed.
func TestRefusesWithoutDatabase(t *testing.T) {
	t.Parallel()
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
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); k != "DATABASE_URL" && !strings.HasPrefix(k, "PG") && !strings.HasPrefix(k, "AWS_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, envRunMain+"=1", "QUEUE_URL=http://127.0.0.1:1/000000000000/none",
				"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1", "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
			cmd.Env = append(cmd.Env, tc.extra...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("main: %v, want exit status 1; output:\n%s", err, out)
			}
			for _, name := range []string{"DATABASE_URL", "PGHOST", "PGDATABASE", "PGSERVICE"} {
				if !strings.Contains(string(out), name) {
					t.Errorf("the message does not name %s:\n%s", name, out)
				}
			}
		})
	}
}

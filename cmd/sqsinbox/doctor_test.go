package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// TestDoctorCLI (the pass's SQS server, PostgreSQL): `sqsinbox doctor` exits 0 on a queue with
// a DLQ and a migrated database, 1 with --inbox-retention shorter than the queue's, prints the
// finding in its table and in --json, and fails on a warning only with --strict.
func TestDoctorCLI(t *testing.T) {
	cli(t, "", "migrate", "up", "--database-url", db.URL).mustOK(t)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "doctor", Retention: 4 * 24 * time.Hour, MaxReceiveCount: 5})
	base := []string{"doctor", "--queue", q.URL, "--database-url", db.URL, "--no-sns", "--pool-size", "12"}
	r := cli(t, "", base...)
	if r.code != 0 || !strings.Contains(r.stdout, "0 errors") {
		t.Fatalf("clean: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", append(base, "--inbox-retention", "1d")...)
	if r.code != 1 || !strings.Contains(r.stdout, "queue.retention") || !strings.Contains(r.stderr, "1 errors") {
		t.Fatalf("short retention: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", append(base, "--inbox-retention", "1d", "--json")...)
	var j struct {
		Findings []struct{ Check, Severity, Fix string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || r.code != 1 || len(j.Findings) == 0 ||
		j.Findings[0].Check != "queue.retention" || j.Findings[0].Severity != "error" || j.Findings[0].Fix == "" {
		t.Fatalf("--json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	warn := append(base[:len(base)-1:len(base)-1], "4") // a pool under the concurrency: a warning
	if r = cli(t, "", warn...); r.code != 0 || !strings.Contains(r.stdout, "database.pool") {
		t.Fatalf("warning: exit %d\n%s", r.code, r.stdout)
	}
	if r = cli(t, "", append(warn, "--strict")...); r.code != 1 {
		t.Fatalf("--strict with a warning: exit %d\n%s", r.code, r.stdout)
	}
	if r = cli(t, "", "doctor", "--sns-mode", "sometimes", "--no-db", "--queue", q.URL); r.code != 2 {
		t.Fatalf("bad --sns-mode: exit %d", r.code)
	}
}

// TestDoctorCLIBehindPgBouncer (PostgreSQL behind Debian's PgBouncer in transaction mode,
// harness/pgbouncer): through the pooler, with pgx's default query mode in the URL, `sqsinbox
// doctor` connects and reports the pooler finding; with default_query_exec_mode=exec it is clean.
func TestDoctorCLIBehindPgBouncer(t *testing.T) {
	cli(t, "", "migrate", "up", "--database-url", db.URL).mustOK(t)
	b, err := pgbouncer.Start(t.Context(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sep := "?"
	if strings.Contains(b.URL, "?") {
		sep = "&"
	}
	r := cli(t, "", "doctor", "--database-url", b.URL, "--pool-size", "12")
	if r.code != 1 || !strings.Contains(r.stdout, "database.pooler") {
		t.Fatalf("cache_statement behind the pooler: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", "doctor", "--database-url", b.URL+sep+"default_query_exec_mode=exec", "--pool-size", "12")
	if r.code != 0 || !strings.Contains(r.stdout, "0 errors, 0 warnings") {
		t.Fatalf("exec behind the pooler: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

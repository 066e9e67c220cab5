package inbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// oldCommit is a version of this module from before the inbox had layouts (migration 0005), and
// genCommit one from before the keytime layout (0006), which knew the generations layout.
const oldCommit, genCommit = "3a814ba", "bc40899"

// oldClaim is a program built against the inbox package of oldCommit: it claims one event and
// applies it (one row in effects), and prints the outcome, or the error and whether it is a broken
// deployment.
const oldClaim = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

func main() {
	ctx := context.Background()
	url, schema, key := os.Args[1], os.Args[2], os.Args[3]
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	out, err := ib.Run(ctx, "warehouse", key, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+schema+".effects (event_id, handler) VALUES ($1, 'warehouse')", key)
		return err
	})
	if err != nil {
		fmt.Printf("error (broken deployment %v): %v\n", errors.Is(err, inbox.ErrBrokenDeployment), err)
		os.Exit(1)
	}
	fmt.Println(out)
}
`

// TestOldBinaryRefusedAfterSwitch (PostgreSQL; git and the go command): a binary built from the
// inbox package of oldCommit, from before the layouts, claims beside this version. In the table
// layout it applies an event. After the switch to generations its claim fails as a broken
// deployment (the table it inserts into is gone), which pauses its worker, and applies nothing;
// the event it tried is then applied once, by this version.
func TestOldBinaryRefusedAfterSwitch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildOldClaim(t, oldCommit)
	b := setup(t, nil)
	run := func(key string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, db.URL, b.schema, key)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("evt_before"); err != nil || out != "processed" {
		t.Fatalf("the old binary in the table layout: %s, %v; want processed", out, err)
	}
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatal(err)
	}
	out, err := run("evt_after")
	if err == nil || !strings.Contains(out, "error (broken deployment true)") || !strings.Contains(out, "processed_messages") {
		t.Errorf("the old binary after the switch: %s, %v; want a broken deployment naming processed_messages", out, err)
	}
	if got, err := b.ib.Run(ctx, "warehouse", "evt_before", b.genEffect("warehouse", "evt_before")); got != inbox.Duplicate || err != nil {
		t.Errorf("evt_before, applied by the old binary before the switch = %v, %v; want a duplicate", got, err)
	}
	if got, err := b.ib.Run(ctx, "warehouse", "evt_after", b.genEffect("warehouse", "evt_after")); got != inbox.Processed || err != nil {
		t.Errorf("evt_after = %v, %v; want processed", got, err)
	}
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); n != 2 {
		t.Errorf("%d effects; want 2", n)
	}
}

// TestGenerationsBinaryRefusedAfterKeyTime (PostgreSQL; git and the go command): a binary built
// from genCommit, which knew the generations layout and not the keytime one, claims beside this
// version. After the switch to keytime it must not claim as in generations (it would probe for a
// routed key's row with a plain read, and miss an uncommitted one): its claim fails as a broken
// deployment, applying nothing, and this version applies the event once.
func TestGenerationsBinaryRefusedAfterKeyTime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildOldClaim(t, genCommit)
	b := setup(t, nil)
	key := v7(time.Now(), 1)
	if err := inbox.SwitchToKeyTime(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, db.URL, b.schema, key).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "error (broken deployment true)") || !strings.Contains(string(out), "processed_messages") {
		t.Errorf("the generations binary after the switch to keytime: %s, %v; want a broken deployment naming processed_messages", out, err)
	}
	ib, err := inbox.New(b.pool, &inbox.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := ib.Run(ctx, "warehouse", key, b.genEffect("warehouse", key)); got != inbox.Processed || err != nil {
		t.Errorf("%s = %v, %v; want processed", key, got, err)
	}
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); n != 1 {
		t.Errorf("%d effects; want 1", n)
	}
}

// buildOldClaim builds oldClaim against the module as of commit (git archive of this
// repository's history) and returns the binary.
func buildOldClaim(t *testing.T, commit string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.CommandContext(t.Context(), "git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		// A shallow clone: the old version is not here to build. TestSwitchToGenerations runs
		// the old claim's statement itself.
		t.Skipf("this repository's history lacks %s (a shallow clone?), the version to build the old binary from: %v", commit, err)
	}
	dir := t.TempDir()
	tarball, err := exec.CommandContext(t.Context(), "git", "-C", root, "archive", "--format=tar", commit).Output()
	if err != nil {
		t.Fatalf("git archive %s (the test needs this repository's history): %v", commit, err)
	}
	untar := exec.CommandContext(t.Context(), "tar", "-x", "-C", dir)
	untar.Stdin = bytes.NewReader(tarball)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(dir, "oldclaim"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oldclaim", "main.go"), []byte(oldClaim), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "oldclaim.bin")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./oldclaim")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the old claim: %v %s", err, out)
	}
	return bin
}

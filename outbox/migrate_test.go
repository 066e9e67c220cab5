package outbox_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// TestMigrations checks that Migrations lists every migration file of the package, in order:
// pending before Migrate, applied after it, and pending again after MigrateDownAll, which
// drops the outbox's table.
func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	schema := "t_" + randHex(6)
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if v, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".up.sql"), "_"); ok && strings.HasSuffix(e.Name(), ".up.sql") {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("migration file %s: %v", e.Name(), err)
			}
			files = append(files, strconv.Itoa(n)+" "+name)
		}
	}
	check := func(when string, applied bool) []outbox.MigrationStatus {
		t.Helper()
		st, err := outbox.Migrations(ctx, pool, schema)
		if err != nil {
			t.Fatalf("Migrations %s: %v", when, err)
		}
		var listed []string
		for _, s := range st {
			listed = append(listed, strconv.Itoa(s.Version)+" "+s.Name)
			if s.AppliedAt.IsZero() == applied {
				t.Errorf("%s, migration %d %s applied at %v; want applied %v", when, s.Version, s.Name, s.AppliedAt, applied)
			}
		}
		if len(listed) == 0 || !slices.Equal(listed, files) {
			t.Fatalf("Migrations %s lists %q; the migration files are %q", when, listed, files)
		}
		return st
	}
	check("before Migrate", false)
	if _, err := outbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if st := check("after Migrate", true); !slices.Contains(st[0].Drops, "outbox_messages") {
		t.Fatalf("migration %d drops %q; want outbox_messages among them", st[0].Version, st[0].Drops)
	}
	v, err := outbox.MigrateDownAll(ctx, pool, schema)
	if err != nil || len(v) != len(files) {
		t.Fatalf("MigrateDownAll = %v, %v; want every one of %d reverted", v, err, len(files))
	}
	check("after MigrateDownAll", false)
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NULL", schema+".outbox_messages").Scan(&gone); err != nil || !gone {
		t.Fatalf("outbox_messages still there after MigrateDownAll (%v)", err)
	}
}

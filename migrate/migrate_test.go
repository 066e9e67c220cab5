package migrate

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// These tests check how migrations are loaded; applying them against PostgreSQL is tested
// through the inbox's migrations in package inbox.
func TestNewRejectsBadSets(t *testing.T) {
	t.Parallel()
	up, down := &fstest.MapFile{Data: []byte("CREATE TABLE {{schema}}.t ()")}, &fstest.MapFile{Data: []byte("DROP TABLE {{schema}}.t")}
	cases := []struct {
		name string
		fs   fstest.MapFS
		want string
	}{
		{"bad name", fstest.MapFS{"m/1_x.up.sql": up}, "does not match"},
		{"up without down", fstest.MapFS{"m/0001_x.up.sql": up}, "needs both"},
		{"gap", fstest.MapFS{"m/0001_a.up.sql": up, "m/0001_a.down.sql": down, "m/0003_c.up.sql": up, "m/0003_c.down.sql": down}, "without gaps"},
	}
	for _, tc := range cases {
		if _, err := New(nil, tc.fs, "m", "s", "v"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(nil, fstest.MapFS{"m/0001_a.up.sql": up, "m/0001_a.down.sql": down}, "m", `s"x`, "v"); err == nil {
		t.Error("a hostile schema name was accepted")
	}
	mg, err := New(nil, fstest.MapFS{"m/0002_b.up.sql": up, "m/0002_b.down.sql": down, "m/0001_a.up.sql": up, "m/0001_a.down.sql": down}, "m", "app", "v")
	if err != nil {
		t.Fatal(err)
	}
	if mg.Latest() != 2 || mg.migrations[0].Name != "a" || !strings.Contains(mg.migrations[0].Up, `CREATE TABLE "app".t`) {
		t.Fatalf("loaded %+v", mg.migrations)
	}
}

func TestDroppedTables(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sql  string
		want []string
	}{
		{"DROP TABLE {{schema}}.processed_messages;", []string{"processed_messages"}},
		{"drop table if exists {{schema}}.a, {{schema}}.\"b\" cascade;\nDROP TABLE {{schema}}.c", []string{"a", "b", "c"}},
		{"-- keeps the table\nALTER TABLE {{schema}}.k DROP COLUMN expires_at;\nDROP INDEX {{schema}}.k_idx;", nil},
		{"DROP TABLE other.t;", nil},
	}
	for _, tc := range cases {
		if got := droppedTables(tc.sql); !slices.Equal(got, tc.want) {
			t.Errorf("droppedTables(%q) = %q, want %q", tc.sql, got, tc.want)
		}
	}
}

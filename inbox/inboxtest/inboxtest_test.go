package inboxtest_test

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
)

// notes is a user's migration set: a table, unqualified and qualified with {{schema}}.
var notes = fstest.MapFS{
	"m/0001_notes.up.sql":   {Data: []byte(`CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL)`)},
	"m/0001_notes.down.sql": {Data: []byte(`DROP TABLE {{schema}}.notes`)},
	"m/0002_tags.up.sql":    {Data: []byte(`CREATE TABLE {{schema}}.tags (name text PRIMARY KEY)`)},
	"m/0002_tags.down.sql":  {Data: []byte(`DROP TABLE {{schema}}.tags`)},
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// TestExample runs the package example's handler test. It uses PostgreSQL; no SQS server.
func TestExample(t *testing.T) {
	t.Parallel()
	testPickTaskOnce(t)
}

// TestSchemaPerTest runs two tests in parallel, each with a fixture: each gets a schema of its
// own, in which the user's migrations, SQL and setup ran in order and the user's tables are found
// unqualified, beside the inbox's; once the two have ended (their cleanups ran before t.Run
// returns), both schemas are gone. It uses PostgreSQL; no SQS server.
func TestSchemaPerTest(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		schemas []string
	)
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"first", "second"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := inboxtest.New(t,
					inboxtest.WithMigrations(notes, "m"),
					inboxtest.WithSQL(`INSERT INTO notes (body) VALUES ('sql')`),
					inboxtest.WithSetup(func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO notes (body) VALUES ('setup')`)
						return err
					}))
				mu.Lock()
				schemas = append(schemas, db.Schema)
				mu.Unlock()
				ctx := t.Context()
				if !identifier.MatchString(db.Schema) || !strings.HasPrefix(db.Schema, inboxtest.SchemaPrefix) {
					t.Errorf("schema %q", db.Schema)
				}
				if db.Inbox.Schema() != db.Schema {
					t.Errorf("the inbox's schema is %q, want %q", db.Inbox.Schema(), db.Schema)
				}
				if _, err := db.Pool.Exec(ctx, `INSERT INTO notes (body) VALUES ($1)`, name); err != nil {
					t.Fatal(err)
				}
				var current string
				var bodies []string
				var inboxTable, tagsTable string
				err := db.Pool.QueryRow(ctx, `SELECT current_schema(), (SELECT array_agg(body ORDER BY id) FROM notes),
					to_regclass('processed_messages')::text, to_regclass('tags')::text`).Scan(&current, &bodies, &inboxTable, &tagsTable)
				if err != nil {
					t.Fatal(err)
				}
				if current != db.Schema || inboxTable != "processed_messages" || tagsTable != "tags" {
					t.Errorf("current_schema %q, processed_messages %q, tags %q; want the test's schema %q, and both tables in it",
						current, inboxTable, tagsTable, db.Schema)
				}
				if want := []string{"sql", "setup", name}; !slices.Equal(bodies, want) {
					t.Errorf("notes %v, want %v: the SQL, the setup and this test's only", bodies, want)
				}
				out, err := db.Inbox.Run(ctx, "notes", "evt_1", func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO notes (body) VALUES ('inbox')`)
					return err
				})
				if err != nil || out != inbox.Processed {
					t.Errorf("the inbox: %v, %v", out, err)
				}
			})
		}
	})
	if len(schemas) != 2 || schemas[0] == schemas[1] {
		t.Fatalf("schemas %v, want two different ones", schemas)
	}
	db := inboxtest.New(t)
	var left []string
	if err := db.Pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(nspname::text), '{}') FROM pg_namespace WHERE nspname = ANY($1)`,
		schemas).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("schemas %v remain after their tests ended", left)
	}
}

// TestHostileTestName: a test name with quotes, a statement and non-ASCII letters gives a valid
// schema name, and nothing but that schema is touched. It uses PostgreSQL; no SQS server.
func TestHostileTestName(t *testing.T) {
	t.Parallel()
	name := `x"; DROP SCHEMA public CASCADE; --` + strings.Repeat("é", 40) + strings.Repeat("y", 80)
	var schema string
	t.Run(name, func(t *testing.T) {
		db := inboxtest.New(t, inboxtest.WithSQL(`CREATE TABLE t (x int)`))
		schema = db.Schema
		if !identifier.MatchString(db.Schema) || !strings.HasPrefix(db.Schema, inboxtest.SchemaPrefix+"testhostiletestname_x_drop_schema") {
			t.Errorf("schema %q for test %q", db.Schema, t.Name())
		}
	})
	db := inboxtest.New(t)
	var public, gone bool
	if err := db.Pool.QueryRow(t.Context(), `SELECT to_regnamespace('public') IS NOT NULL, to_regnamespace($1) IS NULL`, schema).
		Scan(&public, &gone); err != nil {
		t.Fatal(err)
	}
	if !public || !gone {
		t.Errorf("public exists: %v; %s dropped: %v", public, schema, gone)
	}
}

// TestWithDatabaseURL points a second fixture at the first one's database by its URL: it gets a
// schema of its own there. It uses PostgreSQL; no SQS server.
func TestWithDatabaseURL(t *testing.T) {
	t.Parallel()
	first := inboxtest.New(t)
	second := inboxtest.New(t, inboxtest.WithDatabaseURL(first.Pool.Config().ConnString()))
	var a, b string
	if err := first.Pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&a); err != nil {
		t.Fatal(err)
	}
	if err := second.Pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&b); err != nil {
		t.Fatal(err)
	}
	if a != b || first.Schema == second.Schema {
		t.Errorf("databases %s and %s, schemas %s and %s; want one database, two schemas", a, b, first.Schema, second.Schema)
	}
}

// fatalRecorder is t, except that Fatal and Fatalf record the message and end the goroutine, so
// that a test can see New fail.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// newFails calls New on a goroutine of its own and returns the message it failed the test with,
// or "" when it returned.
func newFails(t *testing.T, opts ...inboxtest.Option) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inboxtest.New(r, opts...)
	}()
	<-done
	return r.msg
}

// TestNewRefusesBadOptions: each invalid or hostile option fails the test with a message that
// names it. The ones checked before any database work need none; the others use PostgreSQL.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		opt  inboxtest.Option
		want string
	}{
		"inbox schema":         {inboxtest.WithInboxConfig(&inbox.Config{Schema: `public"; DROP SCHEMA public CASCADE; --`}), "leave it empty"},
		"inbox config nil":     {inboxtest.WithInboxConfig(nil), "WithInboxConfig: cfg is nil"},
		"inbox config invalid": {inboxtest.WithInboxConfig(&inbox.Config{LockTimeout: -1}), "Config.LockTimeout"},
		"empty URL":            {inboxtest.WithDatabaseURL(""), "WithDatabaseURL: the URL is empty"},
		"bad URL":              {inboxtest.WithDatabaseURL("postgres://u@[::1/db"), "WithDatabaseURL:"},
		"nil fsys":             {inboxtest.WithMigrations(nil, "m"), "WithMigrations: fsys is nil"},
		"no such dir":          {inboxtest.WithMigrations(notes, "nope"), "WithMigrations(nope)"},
		"misnamed file": {inboxtest.WithMigrations(fstest.MapFS{"m/1_x.sql": {Data: []byte(`SELECT 1`)}}, "m"),
			"does not match NNNN_name"},
		"failing migration": {inboxtest.WithMigrations(fstest.MapFS{
			"m/0001_x.up.sql":   {Data: []byte(`CREATE TABLE (`)},
			"m/0001_x.down.sql": {Data: []byte(`SELECT 1`)},
		}, "m"), "migrations in m: migrate: up 0001_x"},
		"empty SQL":   {inboxtest.WithSQL("SELECT 1", " "), "WithSQL: statement 2 is empty"},
		"failing SQL": {inboxtest.WithSQL("SELECT 1", "SELECT * FROM no_such_table"), "SQL: SELECT * FROM no_such_table"},
		"nil setup":   {inboxtest.WithSetup(nil), "WithSetup: fn is nil"},
		"nil option":  {nil, "an Option is nil"},
		"unreachable database": {inboxtest.WithDatabaseURL("postgres://nobody@127.0.0.1:1/none?connect_timeout=10"),
			"create schema inboxtest_"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			msg := newFails(t, c.opt)
			if !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, "inboxtest: ") {
				t.Errorf("New failed with %q, want a message with %q", msg, c.want)
			}
		})
	}
}

// TestNoDatabase: without TEST_DATABASE_URL (and WithDatabaseURL), New fails the test with a
// message that names the variable and where to find a database, nearest first: `make dev`'s
// DATABASE_URL, then a local PostgreSQL, and the docker compose alternative last. No server; it
// changes the process's environment, so it does not run in parallel.
func TestNoDatabase(t *testing.T) {
	t.Setenv(inboxtest.EnvURL, "")
	msg := newFails(t)
	at := -1
	for _, want := range []string{"inboxtest: TEST_DATABASE_URL is not set", "WithDatabaseURL", "`make dev`",
		"TEST_DATABASE_URL=$DATABASE_URL", "local PostgreSQL", "docker compose -f localstack/docker-compose.yml"} {
		i := strings.Index(msg, want)
		switch {
		case i < 0:
			t.Errorf("New failed with %q, want a message with %q", msg, want)
		case i < at:
			t.Errorf("New failed with %q: %q comes before what precedes it in the list", msg, want)
		default:
			at = i
		}
	}
}

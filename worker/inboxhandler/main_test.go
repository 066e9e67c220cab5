package inboxhandler_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

// Tests here use a real PostgreSQL (pgtest) and, when named ...GoAws, a real SQS-compatible
// server (sqstest: GoAws, or AWS_ENDPOINT_URL_SQS); when named ...Fake, the in-process fake.
var (
	db  *pgtest.Server
	srv *sqstest.Server
	// dbURL is db.URL, or the parent's database in a child process.
	dbURL string
)

// envChild marks a re-executed test binary that runs one worker (see child_test.go).
const envChild = "SQSINBOX_WORKER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		dbURL = os.Getenv("SQSINBOX_CHILD_DB")
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	if srv, err = sqstest.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	if db, err = pgtest.Start(ctx, "inboxhandler"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	dbURL = db.URL
	code := m.Run()
	if code == 0 && os.Getenv("SQSINBOX_SKIP_GOLEAK") == "" {
		if err := sqstest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

type bundle struct {
	pool   *pgxpool.Pool
	ib     *inbox.Inbox
	schema string
}

// setup gives the test a pool and an inbox in a freshly migrated schema of its own, with a
// business table "effects" (no unique key, so a double effect shows).
func setup(t testing.TB, cfg *inbox.Config) *bundle { t.Helper(); return setupOn(t, dbURL, cfg) }

// setupOn is setup on the database at url.
func setupOn(t testing.TB, url string, cfg *inbox.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := "t_" + randHex(6)
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.effects (event_id text NOT NULL, pid int NOT NULL DEFAULT pg_backend_pid())`); err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool, ib: newInbox(t, pool, schema, cfg), schema: schema}
}

func newInbox(t testing.TB, pool *pgxpool.Pool, schema string, cfg *inbox.Config) *inbox.Inbox {
	var c inbox.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	ib, err := inbox.New(pool, &c)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// effect is the handler of the tests: one business write per event.
func (b *bundle) effect(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
	key, _, _ := inbox.EventKey(ctx)
	_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.effects (event_id) VALUES ($1)`, key)
	return err
}

func (b *bundle) handler(t testing.TB, fn inboxhandler.Func) *inboxhandler.Handler {
	t.Helper()
	if fn == nil {
		fn = b.effect
	}
	h, err := inboxhandler.New(b.ib, "warehouse", nil, fn)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (b *bundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// checkOnce fails unless every event of events has exactly one effect and nothing else has one.
func (b *bundle) checkOnce(t testing.TB, events []string) {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT event_id, count(*) FROM `+b.schema+`.effects GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, e := range events {
		if got[e] != 1 {
			bad++
			if bad <= 5 {
				t.Errorf("event %s has %d effects, want 1", e, got[e])
			}
		}
		delete(got, e)
	}
	if bad > 5 {
		t.Errorf("... %d events in all without exactly one effect", bad)
	}
	if len(got) > 0 {
		t.Errorf("%d unexpected events have effects", len(got))
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func events(n int) ([]string, []sqstest.Message) {
	ids := make([]string, n)
	msgs := make([]sqstest.Message, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_%d_%s", i, randHex(3))
		msgs[i] = sqstest.Message{Body: fmt.Sprintf(`{"id":%q,"order":"o-%d"}`, ids[i], i)}
	}
	return ids, msgs
}

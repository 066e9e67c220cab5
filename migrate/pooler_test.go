package migrate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/migrate"
)

// TestConcurrentMigratorsBehindPooler runs four migrators of one schema at once through PgBouncer
// in transaction mode (PostgreSQL, PgBouncer), with other clients' short statements on the
// pooler, which is what hands a client's statements to different server connections. Each
// migration creates a table (so running one twice fails) and takes a moment. Every migrator
// must return without error, each migration must be applied exactly once, and a migrator run
// afterwards must find the lock free.
func TestConcurrentMigratorsBehindPooler(t *testing.T) {
	b := pgbouncer.Busy(t, db, nil, 4)
	fsys := fstest.MapFS{}
	for _, name := range []string{"0001_a", "0002_b", "0003_c"} {
		fsys["m/"+name+".up.sql"] = &fstest.MapFile{Data: []byte("SELECT pg_sleep(0.2); CREATE TABLE {{schema}}.made_" + name[5:] + " (id int)")}
		fsys["m/"+name+".down.sql"] = &fstest.MapFile{Data: []byte("DROP TABLE {{schema}}.made_" + name[5:])}
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "mig_" + hex.EncodeToString(rb[:])

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const migrators = 4
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done []int
		errs []error
	)
	for range migrators {
		pool, err := pgxpool.New(ctx, b.URL+"&default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := migrate.Up(ctx, pool, fsys, "m", schema, "versions")
			mu.Lock()
			defer mu.Unlock()
			done = append(done, v...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent migrators failed: %v", errs)
	}
	slices.Sort(done)
	if !slices.Equal(done, []int{1, 2, 3}) {
		t.Fatalf("the migrators applied %v together, want each of 1, 2, 3 once", done)
	}
	pool, err := pgxpool.New(ctx, b.URL+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".versions").Scan(&n); err != nil || n != 3 {
		t.Fatalf("versions recorded: %d, %v; want 3", n, err)
	}
	// Nothing left held: a migrator (down one step, then up again) finishes well within the
	// deadline.
	mg, err := migrate.New(pool, fsys, "m", schema, "versions")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := mg.Down(ctx, 1); err != nil || !slices.Equal(v, []int{3}) {
		t.Fatalf("Down(1) after the race = %v, %v; want [3]", v, err)
	}
	if v, err := mg.Up(ctx); err != nil || !slices.Equal(v, []int{3}) {
		t.Fatalf("Up after Down(1) = %v, %v; want [3]", v, err)
	}
}

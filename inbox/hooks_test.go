package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

type stepKey struct{}

// recorder records the steps Hooks observe, and checks that Done gets the context Start returned.
type recorder struct {
	mu    sync.Mutex
	steps []inbox.StepInfo
	bad   []string
}

func (r *recorder) hooks() *inbox.Hooks {
	return &inbox.Hooks{
		Start: func(ctx context.Context, s *inbox.StepInfo) context.Context {
			return context.WithValue(ctx, stepKey{}, s.Step)
		},
		Done: func(ctx context.Context, s *inbox.StepInfo) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if ctx.Value(stepKey{}) != s.Step {
				r.bad = append(r.bad, fmt.Sprintf("%s: Done's context is not Start's", s.Step))
			}
			r.steps = append(r.steps, *s)
		},
	}
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.steps {
		out = append(out, fmt.Sprintf("%s %s %s/%s tx=%v err=%v sqlstate=%s", s.Step, s.Outcome, s.Handler, s.Key, s.InTx, s.Err != nil, s.SQLState))
		if s.Duration <= 0 {
			r.bad = append(r.bad, fmt.Sprintf("%s: duration %v", s.Step, s.Duration))
		}
	}
	r.steps = nil
	return out
}

// TestHooks: Run's claim and commit, and RunTx's claim, reach the hooks with their outcomes.
func TestHooks(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	b := setup(t, &inbox.Config{Hooks: rec.hooks(), LockTimeout: 100 * time.Millisecond})
	ctx := t.Context()
	nop := func(context.Context, pgx.Tx) error { return nil }
	check := func(what string, want ...string) {
		t.Helper()
		got := rec.take()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: steps\n%q\nwant\n%q", what, got, want)
		}
	}
	if _, err := b.ib.Run(ctx, "h", "e1", nop); err != nil {
		t.Fatal(err)
	}
	check("fresh", "claim fresh h/e1 tx=false err=false sqlstate=", "commit committed h/e1 tx=false err=false sqlstate=")
	if _, err := b.ib.Run(ctx, "h", "e1", nop); err != nil {
		t.Fatal(err)
	}
	check("duplicate", "claim duplicate h/e1 tx=false err=false sqlstate=")
	if _, err := b.ib.Run(ctx, "h", "e2", func(context.Context, pgx.Tx) error { return errors.New("boom") }); err == nil {
		t.Fatal("Run succeeded")
	}
	check("function failed: claimed, no commit", "claim fresh h/e2 tx=false err=false sqlstate=")

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := b.ib.RunTx(ctx, tx, "h", "e3", nop); err != nil {
		t.Fatal(err)
	}
	check("RunTx", "claim fresh h/e3 tx=true err=false sqlstate=")
	if _, err := b.ib.Run(ctx, "h", "e3", nop); !errors.Is(err, inbox.ErrClaimBlocked) {
		t.Fatalf("Run = %v, want ErrClaimBlocked", err)
	}
	check("blocked", "claim blocked h/e3 tx=false err=true sqlstate=55P03")
	if len(rec.bad) > 0 {
		t.Error(rec.bad)
	}
}

// BenchmarkRunHooks measures Run (claim, an empty function, commit; one connection) with
// Config.Hooks nil and with hooks whose funcs do nothing, interleaved one call each, and
// reports each one's ns/op and the ratio: the cost of the hooks' own machinery.
func BenchmarkRunHooks(b *testing.B) {
	ctx := context.Background()
	pool := newPool(b, 2)
	schema := "bench_" + randHex(4)
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	plain, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	hooked, err := inbox.New(pool, &inbox.Config{Schema: schema, Hooks: &inbox.Hooks{
		Start: func(ctx context.Context, _ *inbox.StepInfo) context.Context { return ctx },
		Done:  func(context.Context, *inbox.StepInfo) {},
	}})
	if err != nil {
		b.Fatal(err)
	}
	nop := func(context.Context, pgx.Tx) error { return nil }
	var took [2]time.Duration
	n := 0
	for b.Loop() {
		for i, ib := range []*inbox.Inbox{plain, hooked} {
			n++
			start := time.Now()
			if _, err := ib.Run(ctx, "bench", "evt_"+strconv.Itoa(n), nop); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
	}
	per := float64(n / 2)
	b.ReportMetric(float64(took[0].Nanoseconds())/per, "ns/op-nil")
	b.ReportMetric(float64(took[1].Nanoseconds())/per, "ns/op-hooks")
	b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
	allocs := func(ib *inbox.Inbox) float64 {
		return testing.AllocsPerRun(50, func() {
			n++
			_, _ = ib.Run(ctx, "bench", "evt_"+strconv.Itoa(n), nop)
		})
	}
	b.ReportMetric(allocs(plain), "allocs/op-nil")
	b.ReportMetric(allocs(hooked), "allocs/op-hooks")
}

package workerapp_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// TestMigrateNothingToApply (PostgreSQL): `migrate` run twice says, the second time, that the
// inbox's migrations and the program's own had nothing to apply, and logs no "versions":null.
func TestMigrateNothingToApply(t *testing.T) {
	s := spec
	s.Migrate = func(context.Context, *pgxpool.Pool) ([]int, error) { return nil, nil }
	vars := map[string]string{"DATABASE_URL": srv.DB.URL}
	for range 2 {
		if err := workerapp.Run(t.Context(), s, workerapp.Options{Args: []string{"migrate"}, Getenv: env(vars), Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
	}
	var logs sqstest.Buffer
	if err := workerapp.Run(t.Context(), s, workerapp.Options{Args: []string{"migrate"}, Getenv: env(vars),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{`"inbox migrations: nothing to apply`, `"apptest migrations: nothing to apply`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "null") {
		t.Errorf("the log has a null:\n%s", out)
	}
}

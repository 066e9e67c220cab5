package pgpurge

import (
	"strings"
	"testing"
	"time"
)

// TestRunRefusesBadTargets: the checks run before any connection is taken, so a nil pool is
// never reached. Purging itself is tested through the inbox and the idempotency keys.
func TestRunRefusesBadTargets(t *testing.T) {
	t.Parallel()
	ok := Target{Schema: "s", Table: "t", Column: "c", Retention: time.Hour, BatchSize: 10}
	cases := []struct {
		name string
		edit func(*Target)
		want string
	}{
		{"no retention", func(t *Target) { t.Retention = 0 }, "retention (0s) must be positive"},
		{"negative retention", func(t *Target) { t.Retention = -time.Hour }, "must be positive"},
		{"expiry with a retention", func(t *Target) { t.Expiry = true }, "an expiry column takes no retention"},
		{"no batch", func(t *Target) { t.BatchSize = 0 }, "batch size (0) must be positive"},
		{"hostile column", func(t *Target) { t.Column = `c"; drop table t; --` }, "purge identifier"},
		{"hostile floor column", func(t *Target) { t.Floor = &Floor{Column: "x y", Age: time.Hour} }, "purge identifier"},
		{"floor without an age", func(t *Target) { t.Floor = &Floor{Column: "created_at"} }, "the floor's age (0s) must be positive"},
	}
	for _, tc := range cases {
		target := ok
		tc.edit(&target)
		if _, err := Run(t.Context(), nil, target); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

package logdur_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
)

// TestDurationsAreStrings (no servers): through Logger, slog's JSON handler writes durations as
// Go duration strings, in a record's attributes, in WithAttrs's and inside groups; other values
// keep their kinds, and a slog.LogValuer's durations (a handler's LogValue on the worker's
// start-up line) are strings too.
func TestDurationsAreStrings(t *testing.T) {
	var buf bytes.Buffer
	l := logdur.Logger(slog.New(slog.NewJSONHandler(&buf, nil)))
	if logdur.Logger(l) != l {
		t.Error("Logger wrapped a logger that writes durations as strings already")
	}
	l.With("pause", 1500*time.Millisecond).WithGroup("g").Info("m", "retry_in", time.Second, "n", 3,
		slog.Group("inner", "took", 2*time.Minute, "ok", true), "handler", valuer{})
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	g, _ := got["g"].(map[string]any)
	inner, _ := g["inner"].(map[string]any)
	h, _ := g["handler"].(map[string]any)
	if got["pause"] != "1.5s" || g["retry_in"] != "1s" || g["n"] != 3.0 || inner["took"] != "2m0s" || inner["ok"] != true ||
		h["retention"] != "720h0m0s" || h["name"] != "x" {
		t.Errorf("logged %s", buf.Bytes())
	}
}

// valuer is a slog.LogValuer holding a duration, as inboxhandler's handlers are.
type valuer struct{}

func (valuer) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", "x"), slog.Duration("retention", 30*24*time.Hour))
}

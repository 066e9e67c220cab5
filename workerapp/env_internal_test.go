package workerapp

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// TestWorkerConfigPrecedence: the environment's worker settings override the Spec's, which
// override Options.Worker's; what none sets keeps workerapp's defaults. No server is needed.
func TestWorkerConfigPrecedence(t *testing.T) {
	t.Parallel()
	spec := Spec{Name: "orders", Worker: func(c *worker.Config) {
		c.Concurrency, c.MaxPerGroup, c.HandlerTimeout = 4, 2, time.Minute
	}}
	base := worker.Config{Concurrency: 7, MaxHold: time.Minute, ShutdownTimeout: 9 * time.Second}
	env := map[string]string{"CONCURRENCY": "6", "VISIBILITY_TIMEOUT": "2m", "PREFETCH": "0", "QUEUE_NAME": "orders-q"}
	wc, err := spec.workerConfig(base, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Concurrency (environment over Spec over Options)", wc.Concurrency, 6},
		{"MaxPerGroup (Spec)", wc.MaxPerGroup, 2},
		{"HandlerTimeout (Spec)", wc.HandlerTimeout, time.Minute},
		{"MaxHold (Options)", wc.MaxHold, time.Minute},
		{"ShutdownTimeout (Options)", wc.ShutdownTimeout, 9 * time.Second},
		{"VisibilityTimeout (environment)", wc.VisibilityTimeout, 2 * time.Minute},
		{"Prefetch (PREFETCH=0 means none)", wc.Prefetch, -1},
		{"QueueName (QUEUE_NAME)", wc.QueueName, "orders-q"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	wc, err = Spec{Name: "orders"}.workerConfig(worker.Config{}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if wc.Concurrency != DefaultConcurrency || wc.ShutdownTimeout != StopTimeout || wc.QueueName != "orders" {
		t.Errorf("with nothing set: Concurrency %d, ShutdownTimeout %v, QueueName %q; want %d, %v, orders",
			wc.Concurrency, wc.ShutdownTimeout, wc.QueueName, DefaultConcurrency, StopTimeout)
	}
}

// TestWorkerConfigRefusals: every bad value is reported, each naming its variable and quoting
// its value, and the error wraps ErrBadSetting. No server is needed.
func TestWorkerConfigRefusals(t *testing.T) {
	t.Parallel()
	env := map[string]string{"CONCURRENCY": "-2", "MAX_HOLD": "0s", "PREFETCH": "many", "HANDLER_TIMEOUT": "-1s"}
	_, err := Spec{Name: "x"}.workerConfig(worker.Config{}, func(k string) string { return env[k] })
	if !errors.Is(err, ErrBadSetting) {
		t.Fatalf("got %v, want an error wrapping ErrBadSetting", err)
	}
	for _, want := range []string{`CONCURRENCY="-2": must be at least 1`, `MAX_HOLD="0s": must be positive`,
		`PREFETCH="many": not a whole number`, `HANDLER_TIMEOUT="-1s": must be positive`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %s:\n%v", want, err)
		}
	}
}

// TestSettingsDocumented: `PROGRAM -h`, the package's doc and docs/configuration.md list every
// worker setting read from the environment. No server is needed.
func TestSettingsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("app.go")
	if err != nil {
		t.Fatal(err)
	}
	cfgDoc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	u := usage("prog")
	for _, st := range settings {
		if !strings.Contains(u, "\n  "+st.env+" ") {
			t.Errorf("the usage text does not list %s:\n%s", st.env, u)
		}
		if !strings.Contains(string(doc), "//\t"+st.env+" ") {
			t.Errorf("the package doc (app.go) does not list %s", st.env)
		}
		if !strings.Contains(string(cfgDoc), "| `"+st.env+"` |") {
			t.Errorf("docs/configuration.md's table does not list %s", st.env)
		}
	}
}

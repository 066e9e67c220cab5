package workerapp

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// A setting is one of the worker's settings that the environment may set: its variable, its
// usage text, and how its value is parsed, checked and set.
type setting struct {
	env   string
	usage string
	set   func(c *worker.Config, v string) error
}

// settings are the worker settings read from the environment, in the order `PROGRAM -h` lists
// them. Each check is the one worker.Config applies to its field, so that a bad value is refused
// with the variable's name before anything starts; durations are Go durations ("30s", "5m").
var settings = []setting{
	{"CONCURRENCY", fmt.Sprintf("handler calls at once, each a transaction on a connection of its own (default %d)", DefaultConcurrency),
		wholeNumber(1, 0, func(c *worker.Config, n int) { c.Concurrency = n })},
	{"MAX_PER_GROUP", "most handler calls the messages of one MessageGroupId (a fair queue's tenant) hold at once; 0: no cap (default)",
		wholeNumber(0, 0, func(c *worker.Config, n int) { c.MaxPerGroup = n })},
	{"HANDLER_BATCH", fmt.Sprintf("most messages one handler call (one transaction) takes, 1 to %d (default %d)", worker.MaxHandlerBatch, worker.DefaultHandlerBatch),
		wholeNumber(1, worker.MaxHandlerBatch, func(c *worker.Config, n int) { c.HandlerBatch = n })},
	{"PREFETCH", "received messages held beyond the running ones; 0: none (default: CONCURRENCY x HANDLER_BATCH)",
		wholeNumber(0, 0, func(c *worker.Config, n int) { c.Prefetch = cmp.Or(n, -1) })},
	{"VISIBILITY_TIMEOUT", "visibility timeout asked for on receive and on each extension, whole seconds up to 12h (default: the queue's)",
		duration(worker.MaxVisibility, true, func(c *worker.Config, d time.Duration) { c.VisibilityTimeout = d })},
	{"HANDLER_TIMEOUT", "how long one handler call may run, up to 12h (default " + short(worker.DefaultHandlerTimeout) + ")",
		duration(worker.MaxVisibility, false, func(c *worker.Config, d time.Duration) { c.HandlerTimeout = d })},
	{"SHUTDOWN_TIMEOUT", "how long running handlers may finish after SIGTERM before they are cancelled (default " + short(StopTimeout) + ")",
		duration(0, false, func(c *worker.Config, d time.Duration) { c.ShutdownTimeout = d })},
	{"MAX_HOLD", "longest a received message waits for a handler before it is released (default " + short(worker.DefaultMaxHold) + ")",
		duration(0, false, func(c *worker.Config, d time.Duration) { c.MaxHold = d })},
}

// envError is a worker setting from the environment that was refused: it names the variable and
// quotes its value.
type envError struct {
	env, value, why string
}

func (e *envError) Error() string { return fmt.Sprintf("%s=%q: %s", e.env, e.value, e.why) }

// ErrBadSetting is wrapped by the error for a worker setting in the environment that does not
// parse or is out of range.
var ErrBadSetting = errors.New("bad worker setting in the environment")

func (e *envError) Unwrap() error { return ErrBadSetting }

// wholeNumber parses a whole number from lo to hi (no upper bound when hi is 0).
func wholeNumber(lo, hi int, set func(*worker.Config, int)) func(*worker.Config, string) error {
	return func(c *worker.Config, v string) error {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return errors.New("not a whole number")
		case n < lo || (hi > 0 && n > hi):
			if hi > 0 {
				return fmt.Errorf("must be %d to %d", lo, hi)
			}
			return fmt.Errorf("must be at least %d", lo)
		}
		set(c, n)
		return nil
	}
}

// duration parses a positive Go duration of at most hi (no bound when hi is 0), in whole
// seconds when whole is set.
func duration(hi time.Duration, whole bool, set func(*worker.Config, time.Duration)) func(*worker.Config, string) error {
	return func(c *worker.Config, v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
				return fmt.Errorf("a duration needs a unit: %ss, %sm or %sh", v, v, v)
			}
			return errors.New("not a duration (Go syntax: 30s, 5m, 1h30m)")
		case d <= 0:
			return errors.New("must be positive")
		case whole && d%time.Second != 0:
			return errors.New("must be whole seconds")
		case hi > 0 && d > hi:
			return fmt.Errorf("must be at most %v (SQS's 12-hour cap)", hi)
		}
		set(c, d)
		return nil
	}
}

// workerConfig returns the worker's configuration before the handler is built: base (the
// template of [Options].Worker), then the Spec's own settings ([Spec].Worker), then the worker
// settings of the environment (CONCURRENCY, ...), each overriding the one before; then the
// queue (QUEUE_URL, else QUEUE_NAME, else the Spec's name), and workerapp's defaults for
// Concurrency and ShutdownTimeout. Handler, Logger, Metrics and Payloads are left for Run. An
// error names the variable, quotes its value and wraps [ErrBadSetting].
func (s Spec) workerConfig(base worker.Config, getenv func(string) string) (worker.Config, error) {
	wc := base
	if s.Worker != nil {
		s.Worker(&wc)
	}
	var errs []error
	for _, st := range settings {
		v := getenv(st.env)
		if v == "" {
			continue
		}
		if err := st.set(&wc, v); err != nil {
			errs = append(errs, &envError{env: st.env, value: v, why: err.Error()})
		}
	}
	if len(errs) > 0 {
		return wc, errors.Join(errs...)
	}
	wc.Concurrency = cmp.Or(wc.Concurrency, DefaultConcurrency)
	wc.ShutdownTimeout = cmp.Or(wc.ShutdownTimeout, StopTimeout)
	wc.QueueURL = cmp.Or(wc.QueueURL, getenv("QUEUE_URL"))
	wc.QueueName = cmp.Or(wc.QueueName, getenv("QUEUE_NAME"), s.Name)
	return wc, nil
}

// inboxRetention reads INBOX_RETENTION, how long the inbox remembers a processed event (0, when
// unset: the inbox's default, inbox.DefaultRetention). An error names the variable, quotes its
// value and wraps [ErrBadSetting]. The worker's start refuses a retention shorter than the queue's
// redelivery horizon.
func inboxRetention(getenv func(string) string) (time.Duration, error) {
	v := getenv("INBOX_RETENTION")
	if v == "" {
		return 0, nil
	}
	var ret time.Duration
	err := duration(0, false, func(_ *worker.Config, d time.Duration) { ret = d })(nil, v)
	if err != nil {
		return 0, &envError{env: "INBOX_RETENTION", value: v, why: err.Error()}
	}
	return ret, nil
}

// settingsUsage is the usage text's list of the worker settings.
func settingsUsage() string {
	const indent, width = 20, 96
	var b strings.Builder
	for _, st := range settings {
		line := fmt.Sprintf("  %-*s", indent-2, st.env)
		for _, w := range strings.Fields(st.usage) {
			if len(line)+1+len(w) > width {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", indent)
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// short writes d as a person would: 5m, not 5m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// State is what a worker reports about itself, for health checks and operators.
type State struct {
	// Phase is "new" (Start has not succeeded), "running", "stopping" or "stopped".
	Phase string `json:"phase"`
	// Queue is the queue's name, once started.
	Queue string `json:"queue,omitempty"`
	// Paused is true while the pollers are paused because a dependency every message needs is
	// unavailable (a handler returned [Unavailable]; for the inbox, its database).
	Paused bool `json:"paused"`
	// PauseReason is the error that began the pause.
	PauseReason string `json:"pause_reason,omitempty"`
	// PausedSince is when the pause began.
	PausedSince time.Time `json:"paused_since,omitzero"`
	// BrokenDeployment is true while the pause is for a broken deployment (a handler returned
	// [BrokenDeployment]; for the inbox, a missing table, column, function or grant): readiness
	// then fails at once, since waiting will not fix it.
	BrokenDeployment bool `json:"broken_deployment,omitempty"`
	// LastReceive is when a ReceiveMessage call last succeeded (with messages or without).
	LastReceive time.Time `json:"last_receive,omitzero"`
	// LastCommit is when a message was last processed (or found already done).
	LastCommit time.Time `json:"last_commit,omitzero"`
	// LastProgress is the last sign of life: a poll loop turned, a lease was extended, or a
	// message was settled.
	LastProgress time.Time `json:"last_progress,omitzero"`
	// InFlight is the number of messages whose handlers are running (a batch's count from its
	// start to its commit).
	InFlight int `json:"in_flight"`
	// Held is the number of received messages waiting for their turn: prefetched for a free
	// handler, or behind their FIFO group's running message.
	Held int `json:"held"`
	// Pollers is the number of pollers receiving now (sized to the receive's latency unless
	// Config.Pollers fixes it), and Capacity the most messages the worker holds now (running,
	// held and on their way).
	Pollers  int `json:"pollers"`
	Capacity int `json:"capacity"`
	// Concurrency is the most handler calls the worker runs at once now (sized to the handler's
	// time per message when Config.Concurrency is 0 and the handler is a [ConcurrencyLimiter]).
	Concurrency int `json:"concurrency"`
	// Groups is, with Config.MaxPerGroup on a standard queue, the top message groups by in-flight
	// messages and one entry for the rest ([Worker.Groups]); empty otherwise.
	Groups []GroupStat `json:"groups,omitempty"`
}

// State returns the worker's state now.
func (w *Worker) State() State {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	st := State{Phase: w.life.Phase(), InFlight: w.InFlight()}
	if q == nil {
		st.Phase = "new" // still starting: the queue is published last
		return st
	}
	st.Queue = q.Name
	st.Paused, st.PauseReason, st.PausedSince, st.BrokenDeployment = w.e.pause.state()
	st.LastReceive = unixTime(w.lastReceive.Load())
	st.LastCommit = unixTime(w.e.lastCommit.Load())
	st.LastProgress = unixTime(max(w.e.progress.Load(), w.e.sw.extended.Load(), w.startedAt.UnixNano()))
	st.Held = int(max(w.e.held.Load(), 0))
	st.Pollers, st.Capacity = int(w.size.pollers.Load()), int(w.size.capacity.Load())
	st.Concurrency = int(w.size.runners.Load())
	st.Groups = w.Groups()
	return st
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Defaults for HealthConfig.
const (
	// DefaultLivenessTimeout is how long a running worker may show no sign of life before its
	// liveness check fails.
	DefaultLivenessTimeout = 2 * time.Minute
	// DefaultMaxPause is how long the pollers may stay paused before the readiness check fails.
	DefaultMaxPause = 30 * time.Second
)

// HealthConfig configures [HealthHandler].
type HealthConfig struct {
	// LivenessTimeout is how long the worker may show no sign of life (a poll loop turning, a
	// lease extended, a message settled) before /livez fails. Idle long polls turn the loop every
	// Config.WaitTime, and a long handler's heartbeat every third of the visibility timeout, so a
	// healthy worker is never silent for long. 0 means DefaultLivenessTimeout (2 min).
	LivenessTimeout time.Duration
	// MaxPause is how long the pollers may stay paused (a dependency is unavailable) before
	// /readyz fails. 0 means DefaultMaxPause (30 s).
	MaxPause time.Duration
}

// HealthHandler serves two checks of w as JSON [State]s:
//
//   - /livez (liveness): 200 while the worker is starting, running or stopping and shows signs of
//     life within HealthConfig.LivenessTimeout; 503 when it is wedged. A database outage does
//     not fail it: the worker is alive and waiting. Point ECS's container health check here, so
//     that ECS replaces a wedged task and leaves the others alone in an outage.
//   - /readyz (readiness): 200 while running and not paused for longer than
//     HealthConfig.MaxPause nor for a broken deployment; 503 otherwise (stopping, a dependency
//     down, or a missing table or grant). For dashboards and
//     load balancers, not for ECS's health check: in a database outage every task is not ready,
//     and ECS would kill them all.
//
// Any other path gets 404. The handler only reads the worker's state.
func HealthHandler(w *Worker, cfg *HealthConfig) http.Handler {
	var c HealthConfig
	if cfg != nil {
		c = *cfg
	}
	c.LivenessTimeout = cmp.Or(c.LivenessTimeout, DefaultLivenessTimeout)
	c.MaxPause = cmp.Or(c.MaxPause, DefaultMaxPause)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		st := w.State()
		var ok bool
		switch r.URL.Path {
		case "/livez":
			ok = Live(st, c.LivenessTimeout, time.Now())
		case "/readyz":
			ok = Ready(st, c.MaxPause, time.Now())
		default:
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(rw).Encode(st)
	})
}

// Live reports whether st is alive at now: not stopped, and (once running) with a sign of life
// within timeout.
func Live(st State, timeout time.Duration, now time.Time) bool {
	switch st.Phase {
	case "new":
		return true // starting: Start is bounded by Config.StartTimeout
	case "stopped":
		return false
	}
	return now.Sub(st.LastProgress) <= timeout
}

// Ready reports whether st is ready at now: running, and not paused for longer than maxPause, nor
// paused for a broken deployment.
func Ready(st State, maxPause time.Duration, now time.Time) bool {
	if st.Phase != "running" || (st.Paused && st.BrokenDeployment) {
		return false
	}
	return !st.Paused || now.Sub(st.PausedSince) <= maxPause
}

// CheckHealth asks the /livez of the worker serving [HealthHandler] at addr ("host:port", or
// ":port" for 127.0.0.1) and returns nil when it answers 200 within 3 s, or an error saying what
// it answered. It is the container health check of a worker image without curl: ECS runs the
// binary again with an argument, and main calls it first:
//
//	if len(os.Args) == 2 && os.Args[1] == "healthcheck" {
//		if err := worker.CheckHealth(context.Background(), os.Getenv("HEALTH_ADDR")); err != nil {
//			log.Fatal(err) // exit 1: unhealthy
//		}
//		return
//	}
//
// with, in the task definition, healthCheck.command ["CMD", "/app/worker", "healthcheck"], and
// the worker serving HealthHandler at HEALTH_ADDR (http.ListenAndServe(addr, worker.HealthHandler(w, nil))).
func CheckHealth(ctx context.Context, addr string) error {
	if addr == "" {
		return errors.New("healthcheck: no address: set it to where the worker serves /livez (HEALTH_ADDR)")
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/livez", nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s/livez answered %s: %s", addr, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

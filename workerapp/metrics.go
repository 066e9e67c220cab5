package workerapp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerprom"
)

// serveMetrics reports the worker of wc to Prometheus, served at http://addr/metrics beside the
// health checks (/livez, /readyz) of health, and returns the function that stops the server.
func serveMetrics(addr, queue string, wc *worker.Config, health http.Handler, log *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := workerprom.New(reg, queue)
	if err != nil {
		return nil, err
	}
	if wc.Metrics != nil {
		wc.Metrics = tee{wc.Metrics, m}
	} else {
		wc.Metrics = m
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /livez", health)
	mux.Handle("GET /readyz", health)
	return serve("METRICS_ADDR", addr, mux, log)
}

// serveHealthChecks serves the metrics at METRICS_ADDR and the health checks at HEALTH_ADDR
// (each if set), and returns the function that stops both.
func serveHealthChecks(getenv func(string) string, wc *worker.Config, health *healthSwitch, log *slog.Logger) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	if addr := getenv("METRICS_ADDR"); addr != "" {
		f, err := serveMetrics(addr, queueLabel(*wc), wc, health, log)
		if err != nil {
			return nil, err
		}
		stops = append(stops, f)
	}
	if addr := getenv("HEALTH_ADDR"); addr != "" {
		f, err := serveHealth(addr, health, log)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, f)
	}
	return stop, nil
}

// serveHealth serves the health checks alone at addr.
func serveHealth(addr string, health http.Handler, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /livez", health)
	mux.Handle("GET /readyz", health)
	return serve("HEALTH_ADDR", addr, mux, log)
}

// serve serves h at addr (named by the variable env in errors) until the returned stop is
// called.
func serve(env, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server failed", "env", env, "error", err)
		}
	}()
	log.Info("serving", "env", env, "url", "http://"+l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// healthSwitch serves the worker's health checks once the worker exists, and a starting
// worker's (alive, not ready) before, saying when it waits for the database.
type healthSwitch struct {
	h    atomic.Pointer[http.Handler]
	wait atomic.Bool // waiting for the database (dbWait)
}

// waiting says whether the program waits for its database. A nil s (no health checks) ignores it.
func (s *healthSwitch) waiting(on bool) {
	if s != nil {
		s.wait.Store(on)
	}
}

func (s *healthSwitch) set(w *worker.Worker) {
	h := worker.HealthHandler(w, nil)
	s.h.Store(&h)
}

func (s *healthSwitch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if h := s.h.Load(); h != nil {
		(*h).ServeHTTP(rw, r)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/livez" {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}
	if s.wait.Load() {
		_, _ = rw.Write([]byte(`{"phase":"new","waiting_for":"database"}` + "\n"))
		return
	}
	_, _ = rw.Write([]byte(`{"phase":"new"}` + "\n"))
}

// healthcheck asks the running worker's /livez (worker.CheckHealth), for ECS's container health
// check.
func healthcheck(ctx context.Context, getenv func(string) string) error {
	addr := cmp.Or(getenv("HEALTH_ADDR"), getenv("METRICS_ADDR"))
	if addr == "" {
		return errors.New("healthcheck: set HEALTH_ADDR (or METRICS_ADDR) to where the worker serves /livez")
	}
	return worker.CheckHealth(ctx, addr)
}

// queueLabel is the queue's name for the metrics' label, known before the worker starts.
func queueLabel(wc worker.Config) string {
	if wc.QueueURL != "" {
		return wc.QueueURL[strings.LastIndexByte(wc.QueueURL, '/')+1:]
	}
	return wc.QueueName
}

// tee sends the worker's measurements to two receivers.
type tee [2]worker.Metrics

func (t tee) Add(c worker.Counter, n int) { t[0].Add(c, n); t[1].Add(c, n) }

func (t tee) Observe(h worker.Histogram, d time.Duration) { t[0].Observe(h, d); t[1].Observe(h, d) }

func (t tee) SetInFlight(n int) { t[0].SetInFlight(n); t[1].SetInFlight(n) }

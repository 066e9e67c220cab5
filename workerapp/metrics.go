package workerapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerprom"
)

// serveMetrics reports the worker of wc to Prometheus, served at http://addr/metrics, and returns
// the function that stops the server.
func serveMetrics(addr, queue string, wc *worker.Config, log *slog.Logger) (stop func(), err error) {
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
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("METRICS_ADDR: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+l.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
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

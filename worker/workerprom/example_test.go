package workerprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workerprom"
)

// A worker reporting to Prometheus, with /metrics served for scraping.
func Example() {
	ctx := context.Background()
	metrics, err := workerprom.New(prometheus.DefaultRegisterer, "orders")
	if err != nil {
		log.Fatal(err)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(awsCfg), &worker.Config{
		QueueName: "orders",
		Metrics:   metrics,
		Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			return nil
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", promhttp.Handler())
	go func() { log.Println(http.ListenAndServe(":9090", nil)) }()
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
}

package workerapp

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// payloadReader returns the worker's fetcher of payloads offloaded to S3, from
// SQSINBOX_PAYLOAD_BUCKETS and SQSINBOX_PAYLOAD_MAX_BYTES, or nil when no bucket is named.
func payloadReader(cfg aws.Config, getenv func(string) string) (worker.PayloadFetcher, error) {
	var buckets []string
	for b := range strings.SplitSeq(getenv("SQSINBOX_PAYLOAD_BUCKETS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			buckets = append(buckets, b)
		}
	}
	if len(buckets) == 0 {
		return nil, nil
	}
	var maxBytes int64
	if v := getenv("SQSINBOX_PAYLOAD_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("SQSINBOX_PAYLOAD_MAX_BYTES is %q; want a positive number of bytes", v)
		}
		maxBytes = n
	}
	r, err := s3payload.NewReader(s3payload.ReaderConfig{S3: s3payload.NewClient(cfg), Buckets: buckets, MaxPayload: maxBytes})
	if err != nil {
		return nil, fmt.Errorf("SQSINBOX_PAYLOAD_BUCKETS: %w", err)
	}
	return r, nil
}

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestLastReceiveLogsDeadLetter (every server that counts receives: fauxqs and the fake; GoAws
// reports receive count 1 on every delivery): a message that always fails on a queue with
// maxReceiveCount 2 is logged as "delivered again" after its first receive and as "dead-lettered
// next" after its second, its last, with the delay as retry_in on the first and as dead_letter_in
// (no retry_in) on the last; then it is in the DLQ.
func TestLastReceiveLogsDeadLetter(t *testing.T) {
	eachServer(t, needs(sqstest.ReceiveCount), func(t *testing.T, s *server) {
		q := s.queue(t, sqstest.QueueOptions{Prefix: "lastrecv", MaxReceiveCount: 2})
		s.sendOne(t, q.URL, "poison")
		var logs sqstest.Buffer
		w := workertest.Start(t, s.client, &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Backoff: noBackoff,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				return errors.New("always fails")
			})})
		s.waitCount(t, q.DLQURL, 1, 30*time.Second)
		workertest.Stop(t, w)

		var got []string
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var rec struct {
				Msg          string `json:"msg"`
				ReceiveCount int    `json:"receive_count"`
				MaxReceive   int    `json:"max_receive_count"`
				RetryIn      string `json:"retry_in"`
				DeadLetterIn string `json:"dead_letter_in"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "worker: message failed") {
				got = append(got, fmt.Sprintf("%d/%d retry_in=%q dead_letter_in=%q %s", rec.ReceiveCount, rec.MaxReceive, rec.RetryIn, rec.DeadLetterIn, rec.Msg))
			}
		}
		want := []string{
			`1/2 retry_in="0s" dead_letter_in="" worker: message failed; it will be delivered again`,
			`2/2 retry_in="" dead_letter_in="0s" worker: message failed on its last receive; it will be dead-lettered next`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("failure lines:\n%s\nwant:\n%s\nlog:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), logs.String())
		}
	})
}

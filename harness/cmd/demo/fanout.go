package main

import (
	"context"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/examples/loyalty/loyalty"
	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

// fanout is the topic order-paid and the queues subscribed to it: warehouse's, with raw message
// delivery, and loyalty's, with SNS envelopes that its worker unwraps.
type fanout struct {
	topicARN string
	subs     []*subscriber
}

// subscriber is one queue of the fan-out and the worker that consumes it.
type subscriber struct {
	name, url, dlqURL string
	raw               bool
	how               string // how the queue came to be, for the header
	handler           worker.Handler
	m                 *counters
}

func (s *subscriber) delivery() string {
	if s.raw {
		return "raw delivery"
	}
	return "SNS envelopes, unwrapped by the worker"
}

// ensureFanout creates the topic, the two queues with their DLQs (unless they exist, as
// localstack/ creates them) and the subscriptions. Creating a topic or a subscription that
// exists with the same attributes returns the existing one.
func ensureFanout(ctx context.Context, srv *sqstest.Server, c *sns.Client) (*fanout, error) {
	out, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(topicName)})
	if err != nil {
		return nil, err
	}
	f := &fanout{topicARN: aws.ToString(out.TopicArn)}
	for _, name := range []string{warehouse.HandlerName, loyalty.HandlerName} {
		url, dlqURL, created, err := ensureQueue(ctx, srv.Client(), name)
		if err != nil {
			return nil, err
		}
		s := &subscriber{name: name, url: url, dlqURL: dlqURL, raw: name == warehouse.HandlerName, how: "existing"}
		if created {
			s.how = "created, with " + name + "-dlq and maxReceiveCount " + strconv.Itoa(maxReceiveCount)
		}
		if !s.raw && srv.Kind == sqstest.KindGoAws {
			// GoAws writes the attributes of its envelopes in SQS's shape, not SNS's: the worker
			// would refuse every one (TESTING.md).
			s.raw = true
			s.how += "; raw on GoAws, whose SNS envelopes are malformed"
		}
		if _, err := srv.SubscribeErr(ctx, c, f.topicARN, url, sqstest.SubscribeOptions{Raw: s.raw}); err != nil {
			return nil, err
		}
		f.subs = append(f.subs, s)
	}
	return f, nil
}

func (f *fanout) snapshots() []snapshot {
	out := make([]snapshot, len(f.subs))
	for i, s := range f.subs {
		out[i] = s.m.snapshot()
	}
	return out
}

// handledSince reports whether every subscriber's worker has handled at least n more messages
// than in before.
func (f *fanout) handledSince(before []snapshot, n int) bool {
	for i, s := range f.subs {
		if s.m.handled()-before[i].handled() < n {
			return false
		}
	}
	return true
}

// processed returns which of ids the inbox holds for handler.
func processed(ctx context.Context, pool *pgxpool.Pool, handler string, ids []string) (map[string]bool, error) {
	rows, err := pool.Query(ctx, `SELECT event_id FROM sqsinbox.processed_messages WHERE handler = $1 AND event_id = ANY($2)`, handler, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// inboxRows counts the inbox rows of handler for ids.
func inboxRows(ctx context.Context, pool *pgxpool.Pool, handler string, ids []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM sqsinbox.processed_messages WHERE handler = $1 AND event_id = ANY($2)`, handler, ids).Scan(&n)
	return n, err
}

// setEnv sets k to v and returns a function that sets it back.
func setEnv(k, v string) func() {
	old, had := os.LookupEnv(k)
	_ = os.Setenv(k, v)
	return func() {
		if had {
			_ = os.Setenv(k, old)
		} else {
			_ = os.Unsetenv(k)
		}
	}
}

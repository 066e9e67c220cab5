package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/sqsfake"
)

// Fairness, seen locally. fauxqs and GoAws drop MessageGroupId on a standard queue, so there every
// tenant looks alike; the in-process fake keeps it, and with QueueOptions.Fair delivers as an SQS
// fair queue does. Tenant a's backlog of 1,000 messages is sent before tenant b's 5, and a worker
// with four runners and MaxPerGroup 3 takes them. With oldest-first delivery b's messages wait in
// the queue behind nearly all of a's backlog, cap or not; with fair delivery and the cap they
// wait only until a counts as noisy (in the fake, 30 of its messages in flight), however long
// a's backlog is.
func ExampleConfig_fairQueue() {
	for _, fair := range []bool{false, true} {
		fake := sqsfake.New()
		url := fake.CreateQueue(sqsfake.QueueOptions{Name: "tenants", Fair: fair})
		sendTenant(fake, url, "a", 1000)
		sendTenant(fake, url, "b", 5)

		var mu sync.Mutex
		done := map[string]int{}
		aBeforeB := 0
		all := make(chan struct{})
		w, err := worker.New(fake, &worker.Config{QueueURL: url, Concurrency: 4, MaxPerGroup: 3,
			Logger: slog.New(slog.DiscardHandler),
			Handler: worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
				time.Sleep(2 * time.Millisecond) // the work
				mu.Lock()
				defer mu.Unlock()
				done[m.GroupID]++
				if m.GroupID == "b" && done["b"] == 5 {
					aBeforeB = done["a"]
				}
				if done["a"]+done["b"] == 1005 {
					close(all)
				}
				return nil
			})})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		if err := w.Start(ctx); err != nil {
			panic(err)
		}
		<-all
		if err := w.Stop(ctx); err != nil {
			panic(err)
		}
		fmt.Printf("fair delivery %v: b's 5 waited for half of a's backlog: %v\n", fair, aBeforeB > 500)
	}
	// Output:
	// fair delivery false: b's 5 waited for half of a's backlog: true
	// fair delivery true: b's 5 waited for half of a's backlog: false
}

// sendTenant sends n messages of the tenant (the message group) group to the queue at url.
func sendTenant(fake *sqsfake.Fake, url, group string, n int) {
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, n); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)),
				MessageBody: aws.String(group + "-" + strconv.Itoa(j)), MessageGroupId: aws.String(group)})
		}
		if _, err := fake.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			panic(err)
		}
	}
}

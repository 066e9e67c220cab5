package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// What localstack/init/ready.d/10-create-queues.sh and 20-create-topic.sh create on LocalStack
// with the aws CLI, made here on fauxqs with the SDK, but for the visibility timeout.
// TestSameAsLocalstackScripts reads the two scripts and fails when they and these values differ;
// scripts/localstack-check.sh checks the scripts against what the examples expect. Change all
// three together. The same values are terraform/modules/sqs-worker's defaults, which the user's
// queues (-queue) get too.
var queueNames = []string{"warehouse", "loyalty", "payments", "payments-ledger"}

const (
	// retention is the source queues' MessageRetentionPeriod (the SQS default).
	retention = 4 * 24 * time.Hour
	// visibility is the source queues' VisibilityTimeout: 5 s here, where LocalStack's scripts
	// and the Terraform module give 30 s. fauxqs hands a message sent just after a worker stopped
	// to that worker's abandoned long poll, and the message waits out the visibility timeout
	// before the next worker sees it; locally, that is the cost of every restart. A running
	// worker extends the visibility of what it holds every third of it, so a short one costs
	// nothing else here.
	visibility = 5 * time.Second
	// receiveWait is the source queues' ReceiveMessageWaitTimeSeconds (long polls).
	receiveWait = 20 * time.Second
	// maxReceiveCount is the redrive policy's: the receive after which a message goes to the DLQ.
	maxReceiveCount = 5
	// dlqRetention is the DLQs' MessageRetentionPeriod, longer than the source's: on a standard
	// queue a message's age in the DLQ counts from its original send.
	dlqRetention = 14 * 24 * time.Hour
	// dlqSuffix names each queue's DLQ: warehouse-dlq.
	dlqSuffix = "-dlq"
	// topicName is the SNS topic of the fan-out.
	topicName = "order-paid"
)

// subscriptions are the queues subscribed to the topic: warehouse with raw message delivery,
// loyalty with SNS envelopes that its worker unwraps.
var subscriptions = []struct {
	queue string
	raw   bool
}{{"warehouse", true}, {"loyalty", false}}

// queue is a queue made by createResources.
type queue struct {
	name, url, dlqURL string
}

// fifoSuffix ends the name of a FIFO queue, and of its DLQ.
const fifoSuffix = ".fifo"

// maxQueueName is SQS's longest queue name, and maxBaseName terraform/modules/sqs-worker's
// longest name before ".fifo".
const (
	maxQueueName = 80
	maxBaseName  = 75
)

// dlqName returns the name of the DLQ of the queue name: NAME-dlq, or NAME-dlq.fifo for
// NAME.fifo, as terraform/modules/sqs-worker names it.
func dlqName(name string) string {
	base, fifo := strings.CutSuffix(name, fifoSuffix)
	if fifo {
		return base + dlqSuffix + fifoSuffix
	}
	return name + dlqSuffix
}

// nameRune reports whether r may be in a queue's name (before .fifo).
func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// checkQueueNames refuses a queue name (of -queue) that SQS or the Terraform module would
// refuse, one given twice, one that is the command's own or another's DLQ, and two whose
// exported variables (envName) would be the same.
func checkQueueNames(names []string) error {
	seen := map[string]string{} // exported variable -> queue
	for _, n := range queueNames {
		seen[envName(n, "_QUEUE_URL")] = n
	}
	for _, n := range names {
		base, _ := strings.CutSuffix(n, fifoSuffix)
		switch {
		case base == "" || strings.IndexFunc(base, func(r rune) bool { return !nameRune(r) }) >= 0:
			return fmt.Errorf("-queue %q: a queue name is A-Z, a-z, 0-9, - and _, then .fifo for a FIFO queue", n)
		case len(base) > maxBaseName || len(dlqName(n)) > maxQueueName:
			return fmt.Errorf("-queue %q: too long: at most %d characters before .fifo, and its DLQ %s must fit in %d", n, maxBaseName, dlqName(n), maxQueueName)
		case strings.HasSuffix(base, dlqSuffix):
			return fmt.Errorf("-queue %q: names ending in %s are the DLQs, which the command makes for each queue", n, dlqSuffix)
		}
		v := envName(n, "_QUEUE_URL")
		if other, ok := seen[v]; ok {
			if other == n {
				return fmt.Errorf("-queue %q: given twice, or one of the command's own queues (%s)", n, strings.Join(queueNames, ", "))
			}
			return fmt.Errorf("-queue %q and %q would both be exported as %s: rename one", other, n, v)
		}
		seen[v] = n
	}
	return nil
}

// resources are the queues and the topic made by createResources.
type resources struct {
	queues   []queue
	topicARN string
}

// createResources creates the queues (the command's own, then the user's: names, checked by
// checkQueueNames), their DLQs, the topic and its subscriptions on srv, in the scripts' order:
// each DLQ, its source queue with the redrive policy, then the DLQ's redrive allow policy; then
// the topic, and for each subscriber a queue policy that admits only the topic
// (sqstest.TopicQueuePolicy) and the subscription.
func createResources(ctx context.Context, srv *sqstest.Server, snsClient *sns.Client, names []string) (*resources, error) {
	c := srv.Client()
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	var r resources
	for _, name := range append(slices.Clone(queueNames), names...) {
		dlqAttrs := map[string]string{"MessageRetentionPeriod": secs(dlqRetention)}
		fifo := strings.HasSuffix(name, fifoSuffix)
		if fifo {
			dlqAttrs["FifoQueue"] = "true"
		}
		dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlqName(name)), Attributes: dlqAttrs})
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", dlqName(name), err)
		}
		dlqARN, err := queueARN(ctx, c, aws.ToString(dlq.QueueUrl))
		if err != nil {
			return nil, err
		}
		redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqARN, "maxReceiveCount": maxReceiveCount})
		attrs := map[string]string{
			"MessageRetentionPeriod":        secs(retention),
			"VisibilityTimeout":             secs(visibility),
			"ReceiveMessageWaitTimeSeconds": secs(receiveWait),
			"RedrivePolicy":                 string(redrive),
		}
		if fifo {
			attrs["FifoQueue"] = "true"
		}
		src, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", name, err)
		}
		srcARN, err := queueARN(ctx, c, aws.ToString(src.QueueUrl))
		if err != nil {
			return nil, err
		}
		// Only this source queue may use the DLQ, and messages can be redriven back to it.
		allow, _ := json.Marshal(map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []string{srcARN}})
		if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
			Attributes: map[string]string{"RedriveAllowPolicy": string(allow)}}); err != nil {
			return nil, fmt.Errorf("set the redrive allow policy of %s: %w", dlqName(name), err)
		}
		r.queues = append(r.queues, queue{name: name, url: aws.ToString(src.QueueUrl), dlqURL: aws.ToString(dlq.QueueUrl)})
	}

	t, err := snsClient.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(topicName)})
	if err != nil {
		return nil, fmt.Errorf("create topic %s: %w", topicName, err)
	}
	r.topicARN = aws.ToString(t.TopicArn)
	for _, s := range subscriptions {
		q, ok := r.queue(s.queue)
		if !ok {
			return nil, fmt.Errorf("subscriber %s is not among the queues %v", s.queue, queueNames)
		}
		if _, err := srv.SubscribeErr(ctx, snsClient, r.topicARN, q.url, sqstest.SubscribeOptions{Raw: s.raw}); err != nil {
			return nil, fmt.Errorf("subscribe %s to %s: %w", s.queue, topicName, err)
		}
	}
	return &r, nil
}

func (r *resources) queue(name string) (queue, bool) {
	for _, q := range r.queues {
		if q.name == name {
			return q, true
		}
	}
	return queue{}, false
}

func queueARN(ctx context.Context, c *sqs.Client, url string) (string, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", fmt.Errorf("read the ARN of %s: %w", url, err)
	}
	return out.Attributes["QueueArn"], nil
}

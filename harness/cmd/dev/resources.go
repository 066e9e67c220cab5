package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// What localstack/init/ready.d/10-create-queues.sh and 20-create-topic.sh create on LocalStack
// with the aws CLI, made here on fauxqs with the SDK. TestSameAsLocalstackScripts reads the two
// scripts and fails when they and these values differ; scripts/localstack-check.sh checks the
// scripts against what the examples expect. Change all three together.
var queueNames = []string{"warehouse", "loyalty", "payments", "payments-ledger"}

const (
	// retention is the source queues' MessageRetentionPeriod (the SQS default).
	retention = 4 * 24 * time.Hour
	// visibility is the source queues' VisibilityTimeout.
	visibility = 30 * time.Second
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

// resources are the queues and the topic made by createResources.
type resources struct {
	queues   []queue
	topicARN string
}

// createResources creates the queues, their DLQs, the topic and its subscriptions on srv, in the
// scripts' order: each DLQ, its source queue with the redrive policy, then the DLQ's redrive
// allow policy; then the topic, and for each subscriber a queue policy that admits only the topic
// (sqstest.TopicQueuePolicy) and the subscription.
func createResources(ctx context.Context, srv *sqstest.Server, snsClient *sns.Client) (*resources, error) {
	c := srv.Client()
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	var r resources
	for _, name := range queueNames {
		dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + dlqSuffix),
			Attributes: map[string]string{"MessageRetentionPeriod": secs(dlqRetention)}})
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", name+dlqSuffix, err)
		}
		dlqARN, err := queueARN(ctx, c, aws.ToString(dlq.QueueUrl))
		if err != nil {
			return nil, err
		}
		redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqARN, "maxReceiveCount": maxReceiveCount})
		src, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
			"MessageRetentionPeriod":        secs(retention),
			"VisibilityTimeout":             secs(visibility),
			"ReceiveMessageWaitTimeSeconds": secs(receiveWait),
			"RedrivePolicy":                 string(redrive),
		}})
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
			return nil, fmt.Errorf("set the redrive allow policy of %s: %w", name+dlqSuffix, err)
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

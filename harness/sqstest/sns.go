package sqstest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/worker"
)

// SNS on the test servers. fauxqs serves SNS on its SQS endpoint, with topics (standard and
// FIFO), SQS subscriptions (raw or enveloped), filter policies and PublishBatch; it is the server
// the SNS tests run on. GoAws v0.5.4 has SNS too, but its envelopes are not what SNS sends (see
// TESTING.md), so tests of the SNS path skip there. Start points AWS_ENDPOINT_URL_SNS at a server
// it starts, so that child processes and the CLI reach its SNS as well.

// SNSSupported reports whether the tests' SNS path can run against this server, and if not, why
// (for t.Skip).
func (s *Server) SNSSupported() (bool, string) {
	if s.Kind == KindGoAws {
		return false, "GoAws v0.5.4 wraps SNS notifications in envelopes whose MessageAttributes have SQS's shape ({DataType, StringValue}) instead of SNS's ({Type, Value}), and a MessageId per subscription instead of one per publish; the SNS tests run on the fauxqs pass (TESTING.md)"
	}
	return true, ""
}

// SkipWithoutSNS skips t on a server whose SNS the tests cannot use (see [Server.SNSSupported]).
func (s *Server) SkipWithoutSNS(t testing.TB) {
	t.Helper()
	if ok, why := s.SNSSupported(); !ok {
		t.Skipf("SNS: %s", why)
	}
}

// SNSClient returns an SNS client made with the standard AWS configuration chain, which reads
// the endpoint from AWS_ENDPOINT_URL_SNS (set by Start for a server it starts) or
// AWS_ENDPOINT_URL. For a server the environment named only with AWS_ENDPOINT_URL_SQS (such as
// LocalStack, one endpoint for every service) it uses that endpoint, unless it is an AWS one.
// Like the SQS client, each request body is a plain reader (worker.PlainRequestBodies): a
// Publish retried after a lost answer would publish the message twice.
func (s *Server) SNSClient(ctx context.Context, optFns ...func(*sns.Options)) (*sns.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqstest: load AWS config: %w", err)
	}
	opts := []func(*sns.Options){PlainSNSRequestBodies}
	if os.Getenv("AWS_ENDPOINT_URL_SNS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" && !isAWSEndpoint(s.Endpoint) {
		opts = append(opts, func(o *sns.Options) { o.BaseEndpoint = aws.String(s.Endpoint) })
	}
	return sns.NewFromConfig(cfg, append(opts, optFns...)...), nil
}

// PlainSNSRequestBodies applies worker.PlainRequestBodies to an SNS client: the SDK fault it
// avoids (aws-sdk-go-v2 #2737) is in the HTTP layer every client shares.
func PlainSNSRequestBodies(o *sns.Options) {
	var so sqs.Options
	so.HTTPClient = o.HTTPClient
	worker.PlainRequestBodies(&so)
	o.HTTPClient = so.HTTPClient
}

func isAWSEndpoint(ep string) bool {
	u, err := url.Parse(ep)
	return err == nil && (strings.HasSuffix(u.Hostname(), ".amazonaws.com") || strings.HasSuffix(u.Hostname(), ".amazonaws.com.cn"))
}

// TopicOptions says what topic [Server.CreateTopic] makes.
type TopicOptions struct {
	// Prefix starts the topic's name; a random suffix makes it unique.
	Prefix string
	// FIFO makes a FIFO topic (its name ends in .fifo). Only FIFO queues may subscribe to it.
	FIFO bool
	// ContentBasedDeduplication lets a FIFO topic derive the deduplication id from the body.
	ContentBasedDeduplication bool
}

// Topic is a topic made by [Server.CreateTopic].
type Topic struct {
	Name string
	ARN  string
}

// CreateTopic creates a uniquely named SNS topic. Against a server the harness did not start,
// the topic is deleted when t ends.
func (s *Server) CreateTopic(t testing.TB, o TopicOptions) *Topic {
	t.Helper()
	c, err := s.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tp, err := s.CreateTopicErr(t.Context(), c, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.cmd == nil {
		t.Cleanup(func() {
			_, _ = c.DeleteTopic(context.WithoutCancel(t.Context()), &sns.DeleteTopicInput{TopicArn: aws.String(tp.ARN)})
		})
	}
	return tp
}

// TopicCreator is the part of the SNS API that [Server.CreateTopicErr] uses.
type TopicCreator interface {
	CreateTopic(ctx context.Context, in *sns.CreateTopicInput, optFns ...func(*sns.Options)) (*sns.CreateTopicOutput, error)
}

// CreateTopicErr is CreateTopic for callers without a testing.TB. Like queues, topics are
// created one at a time.
func (s *Server) CreateTopicErr(ctx context.Context, c TopicCreator, o TopicOptions) (*Topic, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := cmp.Or(o.Prefix, "t") + "-" + randomSuffix()
	attrs := map[string]string{}
	if o.FIFO {
		name += ".fifo"
		attrs["FifoTopic"] = "true"
		if o.ContentBasedDeduplication {
			attrs["ContentBasedDeduplication"] = "true"
		}
	}
	out, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		return nil, s.wrap("create topic", err)
	}
	return &Topic{Name: name, ARN: aws.ToString(out.TopicArn)}, nil
}

// SubscribeOptions says how [Server.Subscribe] subscribes a queue to a topic.
type SubscribeOptions struct {
	// Raw turns raw message delivery on: the queue gets the published body and attributes as
	// they were published. Without it SNS wraps each message in a JSON envelope.
	Raw bool
	// FilterPolicy, if set, is the subscription's filter policy (JSON).
	FilterPolicy string
	// FilterPolicyScope is MessageAttributes (the default) or MessageBody.
	FilterPolicyScope string
}

// Subscribe subscribes the queue q to topic tp and returns the subscription's ARN. It first
// gives the queue a policy that lets only that topic send to it, as AWS requires (the test
// servers do not check it; it is skipped on GoAws, whose SetQueueAttributes resets the others).
// Against a server the harness did not start, the subscription is removed when t ends.
func (s *Server) Subscribe(t testing.TB, tp *Topic, q *Queue, o SubscribeOptions) string {
	t.Helper()
	c, err := s.SNSClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	arn, err := s.SubscribeErr(t.Context(), c, tp.ARN, q.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.cmd == nil {
		t.Cleanup(func() {
			_, _ = c.Unsubscribe(context.WithoutCancel(t.Context()), &sns.UnsubscribeInput{SubscriptionArn: aws.String(arn)})
		})
	}
	return arn
}

// Subscriber is the part of the SNS API that [Server.SubscribeErr] uses.
type Subscriber interface {
	Subscribe(ctx context.Context, in *sns.SubscribeInput, optFns ...func(*sns.Options)) (*sns.SubscribeOutput, error)
}

// SubscribeErr is Subscribe for callers without a testing.TB.
func (s *Server) SubscribeErr(ctx context.Context, c Subscriber, topicARN, queueURL string, o SubscribeOptions) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qa, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", s.wrap("read queue ARN", err)
	}
	queueARN := qa.Attributes["QueueArn"]
	if s.Kind != KindGoAws {
		policy, _ := json.Marshal(TopicQueuePolicy(topicARN, queueARN))
		if _, err := s.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL),
			Attributes: map[string]string{"Policy": string(policy)}}); err != nil {
			return "", s.wrap("set queue policy", err)
		}
	}
	// Always explicit: subscribing again with the same attributes returns the subscription that
	// exists (localstack/ makes some), with others it fails.
	attrs := map[string]string{"RawMessageDelivery": strconv.FormatBool(o.Raw)}
	if o.FilterPolicy != "" {
		attrs["FilterPolicy"] = o.FilterPolicy
		attrs["FilterPolicyScope"] = cmp.Or(o.FilterPolicyScope, "MessageAttributes")
	}
	out, err := c.Subscribe(ctx, &sns.SubscribeInput{TopicArn: aws.String(topicARN), Protocol: aws.String("sqs"),
		Endpoint: aws.String(queueARN), Attributes: attrs, ReturnSubscriptionArn: true})
	if err != nil {
		return "", s.wrap("subscribe", err)
	}
	return aws.ToString(out.SubscriptionArn), nil
}

// TopicQueuePolicy is the queue policy that lets the topic, and nothing else, send to the queue
// (the condition on aws:SourceArn), as a JSON-ready value.
func TopicQueuePolicy(topicARN, queueARN string) map[string]any {
	return map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":       "TopicSendsToQueue",
			"Effect":    "Allow",
			"Principal": map[string]string{"Service": "sns.amazonaws.com"},
			"Action":    "sqs:SendMessage",
			"Resource":  queueARN,
			"Condition": map[string]any{"ArnEquals": map[string]string{"aws:SourceArn": topicARN}},
		}},
	}
}

// Publisher is the part of the SNS API that [Publish] uses.
type Publisher interface {
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, optFns ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
}

// Publish publishes msgs to the topic in batches of ten (PublishBatch), each with its String
// attributes; GroupID and DedupID are for FIFO topics. GoAws refuses a batch of ten (it counts
// one entry too many), so against it (SQSINBOX_TEST_GOAWS=1, set by Start) batches are of nine.
func Publish(ctx context.Context, c Publisher, topicARN string, msgs []Message) error {
	size := 10
	if os.Getenv(envChildGoAws) == "1" {
		size = 9
	}
	for len(msgs) > 0 {
		n := min(size, len(msgs))
		entries := make([]snstypes.PublishBatchRequestEntry, n)
		for i, m := range msgs[:n] {
			e := snstypes.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), Message: aws.String(m.Body)}
			if len(m.Attributes)+len(m.Numbers) > 0 {
				e.MessageAttributes = make(map[string]snstypes.MessageAttributeValue, len(m.Attributes)+len(m.Numbers))
				for k, v := range m.Attributes {
					e.MessageAttributes[k] = snstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
				}
				for k, v := range m.Numbers {
					e.MessageAttributes[k] = snstypes.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
				}
			}
			if m.GroupID != "" {
				e.MessageGroupId = aws.String(m.GroupID)
			}
			if m.DedupID != "" {
				e.MessageDeduplicationId = aws.String(m.DedupID)
			}
			entries[i] = e
		}
		out, err := c.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: entries})
		if err != nil {
			return fmt.Errorf("sqstest: publish: %w", err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("sqstest: publish: %d entries failed, first: %s %s", len(out.Failed),
				aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
		}
		msgs = msgs[n:]
	}
	return nil
}

// SendEnvelope sends body to the queue as SNS would deliver it without raw message delivery: a
// Notification envelope from topicARN whose Message is body and whose MessageAttributes are
// attrs (String). It lets a test make envelopes no topic would publish, such as one without an
// event_id, or send them on a server without SNS.
func SendEnvelope(ctx context.Context, c Sender, queueURL, topicARN, body string, attrs map[string]string) error {
	env := map[string]any{
		"Type":             "Notification",
		"MessageId":        "sqstest-" + randomSuffix(),
		"TopicArn":         topicARN,
		"Message":          body,
		"Timestamp":        time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		"SignatureVersion": "1",
		"Signature":        "EXAMPLE",
		"SigningCertURL":   "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
		"UnsubscribeURL":   "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
	}
	if len(attrs) > 0 {
		ma := map[string]map[string]string{}
		for k, v := range attrs {
			ma[k] = map[string]string{"Type": "String", "Value": v}
		}
		env["MessageAttributes"] = ma
	}
	b, _ := json.Marshal(env)
	return Send(ctx, c, queueURL, []Message{{Body: string(b)}})
}

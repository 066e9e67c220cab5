package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsinbox/sqsinbox/worker"
)

// isTopicARN reports whether s looks like an SNS topic ARN: arn:PARTITION:sns:REGION:ACCOUNT:NAME.
func isTopicARN(s string) bool {
	p := strings.Split(s, ":")
	return len(p) == 6 && p[0] == "arn" && p[1] != "" && p[2] == "sns" && p[3] != "" && p[4] != "" && p[5] != ""
}

// topicName is the last part of a topic ARN.
func topicName(arn string) string { return arn[strings.LastIndexByte(arn, ':')+1:] }

// snsClient builds an SNS client from the standard AWS configuration chain, including
// AWS_ENDPOINT_URL_SNS, with the same request-body guard and per-call timeout as the SQS client.
func snsClient(ctx context.Context, timeout time.Duration) (*sns.Client, error) {
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return nil, err
	}
	return sns.NewFromConfig(cfg, plainSNSBodies, func(o *sns.Options) {
		ep := aws.ToString(o.BaseEndpoint)
		if ep == "" {
			ep = "https://sns." + o.Region + ".amazonaws.com"
		}
		o.APIOptions = append(o.APIOptions, callTimeout("SNS", ep, timeout))
	}), nil
}

// plainSNSBodies applies worker.PlainRequestBodies to an SNS client: the SDK fault it avoids
// (a response lost after net/http probes a closed request body, and the call retried) is in the
// HTTP layer every client shares, and a retried Publish would publish twice.
func plainSNSBodies(o *sns.Options) {
	var so sqs.Options
	so.HTTPClient = o.HTTPClient
	worker.PlainRequestBodies(&so)
	o.HTTPClient = so.HTTPClient
}

// snsPublisher is the part of the SNS API that send --topic-arn uses.
type snsPublisher interface {
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, optFns ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
	Publish(ctx context.Context, in *sns.PublishInput, optFns ...func(*sns.Options)) (*sns.PublishOutput, error)
}

// publisher publishes send's batches to a topic: with PublishBatch, in smaller batches once the
// server has refused a batch as too large (GoAws v0.5.4 takes at most nine), or with one Publish
// per message once the server has answered that it has no PublishBatch.
type publisher struct {
	c        snsPublisher
	topicARN string
	stderr   io.Writer
	max      int  // the most entries per PublishBatch the server took; 0 before any refusal
	single   bool // the server has no PublishBatch
}

// errTooMany is a PublishBatch refused for its number of entries.
var errTooMany = errors.New("too many entries in the batch")

// publish publishes up to ten entries (send's SQS entries: the body, its event_id attribute
// and the FIFO ids carry over as they are).
func (p *publisher) publish(ctx context.Context, batch []types.SendMessageBatchRequestEntry) error {
	entries := make([]snstypes.PublishBatchRequestEntry, len(batch))
	for i, en := range batch {
		entries[i] = snsEntry(strconv.Itoa(i), en)
	}
	for len(entries) > 0 {
		n := len(entries)
		if p.max > 0 {
			n = min(n, p.max)
		}
		err := p.publishBatch(ctx, entries[:n])
		if errors.Is(err, errTooMany) && n > 1 {
			p.max = n - 1
			fmt.Fprintf(p.stderr, "sqsinbox send: the server refused a batch of %d: %v; publishing at most %d at a time\n", n, err, p.max)
			continue
		}
		if err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// publishBatch publishes one batch, retrying only the entries that failed.
func (p *publisher) publishBatch(ctx context.Context, entries []snstypes.PublishBatchRequestEntry) error {
	what := "publish to " + topicName(p.topicARN)
	return retryFailed(ctx, what, entries, func(e snstypes.PublishBatchRequestEntry) string { return aws.ToString(e.Id) },
		func(pending []snstypes.PublishBatchRequestEntry) ([]batchFailure, error) {
			if p.single {
				return nil, p.publishEach(ctx, pending)
			}
			out, err := p.c.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(p.topicARN), PublishBatchRequestEntries: pending})
			var ae smithy.APIError
			switch {
			case err == nil:
			case noBatch(err):
				p.single = true
				fmt.Fprintf(p.stderr, "sqsinbox send: the server has no PublishBatch (%s); publishing one message at a time\n", apiError(err))
				return nil, p.publishEach(ctx, pending)
			case errors.As(err, &ae) && strings.HasSuffix(ae.ErrorCode(), "TooManyEntriesInBatchRequest"):
				return nil, fmt.Errorf("%w (%s)", errTooMany, ae.ErrorCode())
			default:
				return nil, fmt.Errorf("%s: %s", what, apiError(err))
			}
			failed := make([]batchFailure, len(out.Failed))
			for i, f := range out.Failed {
				failed[i] = batchFailure{aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message)}
			}
			return failed, nil
		})
}

// publishEach publishes each entry with its own Publish call.
func (p *publisher) publishEach(ctx context.Context, entries []snstypes.PublishBatchRequestEntry) error {
	for _, en := range entries {
		_, err := p.c.Publish(ctx, &sns.PublishInput{TopicArn: aws.String(p.topicARN), Message: en.Message,
			MessageAttributes: en.MessageAttributes, MessageGroupId: en.MessageGroupId, MessageDeduplicationId: en.MessageDeduplicationId})
		if err != nil {
			return fmt.Errorf("publish to %s: %s", topicName(p.topicARN), apiError(err))
		}
	}
	return nil
}

// snsEntry is the PublishBatch entry for send's SQS entry en.
func snsEntry(id string, en types.SendMessageBatchRequestEntry) snstypes.PublishBatchRequestEntry {
	out := snstypes.PublishBatchRequestEntry{Id: aws.String(id), Message: en.MessageBody,
		MessageGroupId: en.MessageGroupId, MessageDeduplicationId: en.MessageDeduplicationId}
	if len(en.MessageAttributes) > 0 {
		out.MessageAttributes = make(map[string]snstypes.MessageAttributeValue, len(en.MessageAttributes))
		for k, v := range en.MessageAttributes {
			out.MessageAttributes[k] = snstypes.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	return out
}

// noBatch reports whether err says that the server does not implement PublishBatch: an
// unknown action (InvalidAction and its kin), or a 404 or 501 that is no SNS error.
func noBatch(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "InvalidAction", "UnknownOperationException", "NotImplemented", "UnsupportedOperation":
			return true
		}
		return false // an answer about this request, such as NotFound for a missing topic
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case 404, 501:
			return true
		}
	}
	return false
}

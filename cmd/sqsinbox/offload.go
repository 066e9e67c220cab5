package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/s3payload"
)

// offloader is send's --offload-bucket: it puts lines in S3 and turns their entries into
// pointers.
type offloader struct {
	w      *s3payload.Writer
	always bool
}

// newOffloader returns the offloader of --offload-bucket, or nil when it is not set.
func newOffloader(ctx context.Context, timeout time.Duration, bucket string, always bool, maxBytes, limit int) (*offloader, error) {
	switch {
	case bucket == "" && always:
		return nil, fmt.Errorf("%w: --offload-always needs --offload-bucket", errUsage)
	case bucket == "":
		return nil, nil
	case maxBytes < limit:
		return nil, fmt.Errorf("%w: --offload-max-bytes %d is under the message limit, %d", errUsage, maxBytes, limit)
	}
	cfg, err := awsConfig(ctx, timeout)
	if err != nil {
		return nil, err
	}
	w, err := s3payload.NewWriter(s3payload.WriterConfig{S3: newS3(cfg, timeout), Bucket: bucket})
	if err != nil {
		return nil, fmt.Errorf("%w: --offload-bucket: %w", errUsage, err)
	}
	return &offloader{w: w, always: always}, nil
}

// put puts line in S3 and makes entry a pointer to it, with the reserved size attribute beside
// the event_id; it returns the entry's size as SQS counts it.
func (o *offloader) put(ctx context.Context, entry *types.SendMessageBatchRequestEntry, key string, line []byte) (int, error) {
	off, err := o.w.Put(ctx, key, line)
	if err != nil {
		return 0, err
	}
	entry.MessageBody = aws.String(off.Body)
	if entry.MessageAttributes == nil {
		entry.MessageAttributes = map[string]types.MessageAttributeValue{}
	}
	entry.MessageAttributes[off.Attribute] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(off.Size)}
	size := len(off.Body)
	for k, a := range entry.MessageAttributes {
		size += len(k) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue))
	}
	return size, nil
}

package sqstest

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sqsinbox/sqsinbox/s3payload"
)

// S3Client returns an S3 client for the server's S3 ([S3]; fauxqs serves it on its one
// endpoint): made with the standard AWS configuration chain, which reads AWS_ENDPOINT_URL_S3 (set
// by Start for a fauxqs it starts) or AWS_ENDPOINT_URL, else the server's endpoint, unless that
// is an AWS one. Buckets are addressed by path, as local servers need.
func (s *Server) S3Client(ctx context.Context, optFns ...func(*s3.Options)) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqstest: load AWS config: %w", err)
	}
	opts := []func(*s3.Options){}
	if os.Getenv("AWS_ENDPOINT_URL_S3") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" && !isAWSEndpoint(s.Endpoint) {
		opts = append(opts, func(o *s3.Options) { o.BaseEndpoint = aws.String(s.Endpoint) })
	}
	return s3payload.NewClient(cfg, append(opts, optFns...)...), nil
}

// CreateBucket makes a bucket of a unique name starting with prefix (lowercase letters, digits
// and '-') and returns its name. The bucket stays until the server stops.
func (s *Server) CreateBucket(ctx context.Context, c *s3.Client, prefix string) (string, error) {
	name := fmt.Sprintf("%s-%s", prefix, randomSuffix())
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if r := c.Options().Region; r != "" && r != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(r)}
	}
	if _, err := c.CreateBucket(ctx, in); err != nil {
		return "", fmt.Errorf("sqstest: create bucket %s: %w", name, err)
	}
	return name, nil
}

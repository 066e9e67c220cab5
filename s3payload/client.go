package s3payload

import (
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// NewClient returns an S3 client for cfg. With an endpoint of its own (AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL, or one optFns sets: LocalStack, fauxqs) it addresses buckets by path, which
// local servers need; against AWS it keeps virtual-hosted addressing.
func NewClient(cfg aws.Config, optFns ...func(*s3.Options)) *s3.Client {
	return s3.NewFromConfig(cfg, append(slices.Clone(optFns), func(o *s3.Options) {
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
	})...)
}

package s3payload_test

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// fakeS3 satisfies the S3 interfaces for tests of configuration only; its calls fail.
type fakeS3 struct{}

func (fakeS3) GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	return nil, errors.New("fakeS3: no objects")
}

func (fakeS3) PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	return nil, errors.New("fakeS3: no objects")
}

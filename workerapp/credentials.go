package workerapp

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// credentialsTimeout bounds the credentials check at start (the EC2 instance metadata service
// may take a few seconds to answer, or not answer at all off EC2).
const credentialsTimeout = 30 * time.Second

// checkCredentials retrieves the AWS credentials once, at start, so that missing ones are
// reported with the settings the SDK's default chain tried, instead of by the first SQS call
// with only the last link's error.
func checkCredentials(ctx context.Context, cfg aws.Config, getenv func(string) string) error {
	if cfg.Credentials == nil {
		return fmt.Errorf("no AWS credentials: tried %s", triedCredentials(getenv))
	}
	ctx, cancel := context.WithTimeout(ctx, credentialsTimeout)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("no AWS credentials: tried %s: %w", triedCredentials(getenv), err)
	}
	return nil
}

// triedCredentials lists the links of the SDK's default credential chain, in its order, with
// the settings that steer each.
func triedCredentials(getenv func(string) string) string {
	set := func(names ...string) string {
		var s []string
		for _, n := range names {
			if getenv(n) != "" {
				s = append(s, n)
			}
		}
		if len(s) == 0 {
			return "none set"
		}
		return strings.Join(s, ", ") + " set"
	}
	profile := cmp.Or(getenv("AWS_PROFILE"), getenv("AWS_DEFAULT_PROFILE"), "default")
	imds := "not disabled"
	if strings.EqualFold(getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		imds = "disabled by AWS_EC2_METADATA_DISABLED"
	}
	return strings.Join([]string{
		"(1) the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (" + set("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") + ")",
		fmt.Sprintf("(2) profile %q (AWS_PROFILE) in %s (AWS_SHARED_CREDENTIALS_FILE) and %s (AWS_CONFIG_FILE)", profile,
			cmp.Or(getenv("AWS_SHARED_CREDENTIALS_FILE"), config.DefaultSharedCredentialsFilename()),
			cmp.Or(getenv("AWS_CONFIG_FILE"), config.DefaultSharedConfigFilename())),
		"(3) web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (" + set("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN") + ")",
		"(4) the ECS task role: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or AWS_CONTAINER_CREDENTIALS_FULL_URI (" +
			set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI") + ")",
		"(5) the EC2 instance role from the instance metadata service (" + imds + ")",
	}, "; ")
}

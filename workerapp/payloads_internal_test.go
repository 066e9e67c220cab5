package workerapp

import (
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsinbox/sqsinbox/s3payload"
)

// TestPayloadReader (no server): SQSINBOX_PAYLOAD_BUCKETS names the buckets the worker may read;
// none means no fetcher; a bad bucket or size is refused, naming the variable.
func TestPayloadReader(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if r, err := payloadReader(aws.Config{}, env(nil)); r != nil || err != nil {
		t.Errorf("no buckets: %v, %v; want no fetcher", r, err)
	}
	r, err := payloadReader(aws.Config{}, env(map[string]string{"SQSINBOX_PAYLOAD_BUCKETS": " payloads-a, ,payloads-b "}))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*s3payload.Reader).Buckets(); !slices.Equal(got, []string{"payloads-a", "payloads-b"}) {
		t.Errorf("buckets %v", got)
	}
	for vars, want := range map[[2]string]string{
		{"Bad_Bucket", ""}: "SQSINBOX_PAYLOAD_BUCKETS: s3payload: ReaderConfig.Buckets: bucket name \"Bad_Bucket\"",
		{"payloads", "-1"}: "SQSINBOX_PAYLOAD_MAX_BYTES is \"-1\"",
		{"payloads", "x"}:  "SQSINBOX_PAYLOAD_MAX_BYTES is \"x\"",
	} {
		_, err := payloadReader(aws.Config{}, env(map[string]string{"SQSINBOX_PAYLOAD_BUCKETS": vars[0], "SQSINBOX_PAYLOAD_MAX_BYTES": vars[1]}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v; want %q", vars, err, want)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/ecstask"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// moduleQueues creates, on the pass's SQS server, the queue and DLQ that
// terraform/modules/sqs-worker makes with the arguments terraform/examples/ecs-worker gives it
// and its defaults for the rest, evaluated from the HCL; it returns the queue's URL.
func moduleQueues(t *testing.T) string {
	t.Helper()
	in, err := ecstask.ModuleInputs("../../terraform/examples/ecs-worker", "queue")
	if err != nil {
		t.Fatal(err)
	}
	num := func(name string) string {
		t.Helper()
		n, err := ecstask.Int(in, name)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(n)
	}
	if v := in["fifo_queue"]; !v.IsKnown() || v.IsNull() || v.True() {
		t.Fatalf("fifo_queue = %#v; the test makes standard queues", v)
	}
	if v := in["kms_key_arn"]; !v.IsNull() {
		t.Fatalf("kms_key_arn = %#v; the test makes SSE-SQS queues (the module's choice without a key)", v)
	}
	c := srv.SQS.Client()
	ctx := t.Context()
	name := fmt.Sprintf("doctor-%d", time.Now().UnixNano()%1e9)
	attrs := func(retention string) map[string]string {
		return map[string]string{"MessageRetentionPeriod": retention, "MaximumMessageSize": num("maximum_message_size"),
			"SqsManagedSseEnabled": "true"}
	}
	d, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq"), Attributes: attrs(num("dlq_message_retention_seconds"))})
	if err != nil {
		t.Fatal(err)
	}
	da, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	qa := attrs(num("message_retention_seconds"))
	qa["VisibilityTimeout"] = num("visibility_timeout_seconds")
	qa["ReceiveMessageWaitTimeSeconds"] = num("receive_wait_time_seconds")
	qa["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%s}`, da.Attributes["QueueArn"], num("max_receive_count"))
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: qa})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(q.QueueUrl)
}

// TestDoctorOnTerraformDefaults (the pass's SQS server, PostgreSQL): with the queues the
// Terraform module makes for the ECS example, evaluated from its HCL, and the database migrated
// by the program, `firstworker doctor` finds no error and exits 0. On fauxqs it finds no warning
// either; GoAws keeps no SqsManagedSseEnabled, so there the queue is reported unencrypted.
//
// Not parallel: it creates queues, which GoAws cannot take while other tests' workers poll.
func TestDoctorOnTerraformDefaults(t *testing.T) {
	bin := binary(t)
	url := moduleQueues(t)
	env := append(baseEnv(), "DATABASE_URL="+srv.DB.URL, "QUEUE_URL="+url)
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, err := cmd.Output()
		return string(out), err
	}
	if out, err := run("migrate"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	out, err := run("doctor")
	if err != nil || !strings.Contains(out, "\n0 errors") {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	if srv.SQS.Kind != sqstest.KindGoAws && !strings.Contains(out, "0 errors, 0 warnings") {
		t.Fatalf("doctor on %s gave warnings:\n%s", srv.SQS.Kind, out)
	}
	if !strings.Contains(out, "checked: queue, sns, database") {
		t.Errorf("doctor did not check the queue, its subscriptions and the database:\n%s", out)
	}
}

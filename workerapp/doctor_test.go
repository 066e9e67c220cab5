package workerapp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// moduleQueue creates a queue and its DLQ with the attributes terraform/modules/sqs-worker gives
// them with its default variables and the ECS example's arguments (visibility 30 s, retention 4
// days, maxReceiveCount 5; the DLQ 14 days; 256 KiB; SSE-SQS), or, with noDLQ, the queue alone.
func moduleQueue(t *testing.T, name string, noDLQ bool) string {
	t.Helper()
	c := srv.SQS.Client()
	attrs := func(ret string) map[string]string {
		return map[string]string{"VisibilityTimeout": "30", "MessageRetentionPeriod": ret, "MaximumMessageSize": "262144",
			"ReceiveMessageWaitTimeSeconds": "20", "SqsManagedSseEnabled": "true"}
	}
	qa := attrs("345600")
	if !noDLQ {
		d, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq"), Attributes: attrs("1209600")})
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		qa["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":5}`, a.Attributes["QueueArn"])
	}
	q, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: qa})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(q.QueueUrl)
}

// TestDoctor (the pass's SQS server, PostgreSQL): `PROGRAM doctor` checks the program's own
// settings: with the queues the Terraform module makes by default and a migrated database it
// finds no error and exits 0; with INBOX_RETENTION shorter than the queue's retention, or a queue
// that has no DLQ, it prints the finding and fails.
func TestDoctor(t *testing.T) {
	vars := map[string]string{"DATABASE_URL": srv.DB.URL, "AWS_ENDPOINT_URL_SQS": srv.SQS.Endpoint}
	if err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"migrate"}, Getenv: env(vars), Logger: exampletest.Logger(t)}); err != nil {
		t.Fatal(err)
	}
	vars["QUEUE_URL"] = moduleQueue(t, "doctor-clean", false)
	var out bytes.Buffer
	err := workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"doctor", "--no-sns"}, Getenv: env(vars),
		Logger: exampletest.Logger(t), Stdout: &out})
	if err != nil || !strings.Contains(out.String(), "0 errors") {
		t.Fatalf("doctor on the module's defaults: %v\n%s", err, out.String())
	}
	// A retention shorter than the queue's 4 days: a redelivery could outlive its inbox row.
	vars["INBOX_RETENTION"] = "24h"
	out.Reset()
	err = workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"doctor", "--json", "--no-sns"}, Getenv: env(vars),
		Logger: exampletest.Logger(t), Stdout: &out})
	if !errors.Is(err, workerapp.ErrDoctorFindings) || !strings.Contains(out.String(), `"check": "queue.retention"`) {
		t.Fatalf("doctor with INBOX_RETENTION=24h: %v\n%s", err, out.String())
	}
	delete(vars, "INBOX_RETENTION")
	vars["QUEUE_URL"] = moduleQueue(t, "doctor-nodlq", true)
	out.Reset()
	err = workerapp.Run(t.Context(), spec, workerapp.Options{Args: []string{"doctor", "--json", "--no-sns"}, Getenv: env(vars),
		Logger: exampletest.Logger(t), Stdout: &out})
	if !errors.Is(err, workerapp.ErrDoctorFindings) || !strings.Contains(out.String(), `"check": "queue.redrive"`) {
		t.Fatalf("doctor on a queue without DLQ: %v\n%s", err, out.String())
	}
}

// TestDoctorReportsWhatStopsTheWorker (the pass's SQS server, PostgreSQL): a handler the program
// cannot build, and a database it cannot reach, are findings of the report, not a bare error.
func TestDoctorReportsWhatStopsTheWorker(t *testing.T) {
	broken := workerapp.Spec{Name: "apptest", Handler: func(context.Context, *workerapp.Deps) (worker.Handler, error) {
		return nil, errors.New("PAYMENTS_URL is not set")
	}}
	url := moduleQueue(t, "doctor-broken", false)
	for _, tc := range []struct {
		name, dbURL, check string
		spec               workerapp.Spec
	}{
		{"handler", srv.DB.URL, "worker.handler", broken},
		{"database", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5", "database.reachable", spec},
	} {
		var out bytes.Buffer
		err := workerapp.Run(t.Context(), tc.spec, workerapp.Options{Args: []string{"doctor", "--json", "--no-sns"},
			Getenv: env(map[string]string{"DATABASE_URL": tc.dbURL, "QUEUE_URL": url}), Logger: exampletest.Logger(t), Stdout: &out})
		if !errors.Is(err, workerapp.ErrDoctorFindings) || !strings.Contains(out.String(), `"check": "`+tc.check+`"`) {
			t.Errorf("%s: %v\n%s", tc.name, err, out.String())
		}
	}
}

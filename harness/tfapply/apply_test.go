//go:build tfapply

// Package tfapply applies the Terraform module for real against fauxqs, runs the warehouse
// worker on the queue the apply made, and destroys it again. It needs OpenTofu and the AWS
// provider, which scripts/tf-test.sh builds and caches; that script runs it (`make tf-test`, and
// `make test` when the tools are cached) with the build tag tfapply and TF_BIN and
// TF_CLI_CONFIG_FILE set.
package tfapply

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

var srv exampletest.Servers

func TestMain(m *testing.M) {
	// fauxqs: GoAws lacks ListQueueTags and SqsManagedSseEnabled, which the provider needs.
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" {
		_ = os.Setenv("SQSINBOX_TEST_SQS", "fauxqs")
	}
	exampletest.Main(m, "tfapply", &srv)
}

// tofu runs the CLI in dir and returns its standard output.
func tofu(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	return tofuCtx(t, t.Context(), dir, args...)
}

// tofuCtx is tofu with an explicit context, for cleanups (t.Context() has ended there).
func tofuCtx(t *testing.T, ctx context.Context, dir string, args ...string) []byte {
	t.Helper()
	bin := os.Getenv("TF_BIN")
	if bin == "" {
		t.Fatal("TF_BIN is not set: run this through scripts/tf-test.sh")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("tofu %v: %v\n%s\n%s", args, err, out.String(), errb.String())
	}
	t.Logf("tofu %s: %v", args[0], time.Since(start).Round(time.Second))
	return out.Bytes()
}

// copyTree copies src to dst, without what a local init or apply left there.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch d.Name() {
		case ".terraform", "terraform.tfstate", "terraform.tfstate.backup", ".terraform.lock.hcl":
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// resource is one resource of `tofu show -json`.
type resource struct {
	Address string         `json:"address"`
	Values  map[string]any `json:"values"`
}

func stateResources(t *testing.T, dir string) map[string]resource {
	t.Helper()
	var st struct {
		Values struct {
			Root struct {
				Children []struct {
					Resources []resource `json:"resources"`
				} `json:"child_modules"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal(tofu(t, dir, "show", "-json"), &st); err != nil {
		t.Fatal(err)
	}
	out := map[string]resource{}
	for _, c := range st.Values.Root.Children {
		for _, r := range c.Resources {
			out[r.Address] = r
		}
	}
	return out
}

// TestApplyConsumeDestroy (fauxqs, PostgreSQL, OpenTofu with the AWS provider): apply
// terraform/examples/localstack (the sqs-worker module: queue, DLQ, redrive and redrive-allow
// policies, SSE; alarms off), check that the attributes SQS reports are the ones the state
// says, run the warehouse worker on the new queue with duplicates, see each event applied once,
// and destroy everything.
func TestApplyConsumeDestroy(t *testing.T) {
	work := t.TempDir()
	copyTree(t, "../../terraform", work)
	dir := filepath.Join(work, "examples", "localstack")
	name := fmt.Sprintf("tf-warehouse-%d", time.Now().UnixNano()%1_000_000)
	vars := []string{"-var", "endpoint=" + srv.SQS.Endpoint, "-var", "create_alarms=false", "-var", "name=" + name}
	tofu(t, dir, "init", "-backend=false", "-input=false", "-no-color")
	applied := false
	t.Cleanup(func() {
		if !applied {
			return
		}
		// fauxqs keeps the redrive-allow policy after the provider deletes it, and the provider
		// then waits for it to go for ever: forget it, and the queues' destroy takes it along.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Minute)
		defer cancel()
		tofuCtx(t, ctx, dir, "state", "rm", "module.queue.aws_sqs_queue_redrive_allow_policy.dlq")
		tofuCtx(t, ctx, dir, append([]string{"destroy", "-auto-approve", "-input=false", "-no-color"}, vars...)...)
		for _, q := range []string{name, name + "-dlq"} {
			_, err := srv.SQS.Client().GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
			var missing *types.QueueDoesNotExist
			if !errors.As(err, &missing) {
				t.Errorf("after destroy, GetQueueUrl(%s) = %v; want QueueDoesNotExist", q, err)
			}
		}
		t.Logf("destroyed: %s and %s are gone", name, name+"-dlq")
	})
	tofu(t, dir, append([]string{"apply", "-auto-approve", "-input=false", "-no-color"}, vars...)...)
	applied = true
	var outputs map[string]struct {
		Value any `json:"value"`
	}
	if err := json.Unmarshal(tofu(t, dir, "output", "-json"), &outputs); err != nil {
		t.Fatal(err)
	}
	queueURL, _ := outputs["queue_url"].Value.(string)
	dlqURL, _ := outputs["dlq_url"].Value.(string)
	if queueURL == "" || dlqURL == "" {
		t.Fatalf("outputs %v: no queue_url or dlq_url", outputs)
	}
	res := stateResources(t, dir)
	c := srv.SQS.Client()
	checkQueue(t, c, queueURL, res["module.queue.aws_sqs_queue.this"])
	checkQueue(t, c, dlqURL, res["module.queue.aws_sqs_queue.dlq"])

	// The worker on the queue the apply made: 20 events, every third sent twice.
	srv.Migrate(t, warehouseSpec)
	r := srv.Start(t, warehouseSpec, queueURL, workerapp.Options{})
	var msgs []sqstest.Message
	for i := range 20 {
		m := sqstest.Message{Body: fmt.Sprintf(`{"id":"evt_tf_%d","order_id":"tf-%d","customer_id":"c","amount":100}`, i, i)}
		msgs = append(msgs, m)
		if i%3 == 0 {
			msgs = append(msgs, m)
		}
	}
	srv.Send(t, queueURL, msgs)
	srv.WaitDrained(t, queueURL, 2*time.Minute)
	r.Stop(t)
	var tasks, orders int
	pool := srv.Pool(t)
	if err := pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT order_id) FROM warehouse.pick_tasks WHERE order_id LIKE 'tf-%'`).Scan(&tasks, &orders); err != nil {
		t.Fatal(err)
	}
	if tasks != 20 || orders != 20 {
		t.Errorf("%d pick tasks for %d orders from %d messages, want 20 and 20", tasks, orders, len(msgs))
	}
	t.Logf("applied, consumed %d messages (%d duplicates) into %d pick tasks, destroying", len(msgs), len(msgs)-20, tasks)
}

var warehouseSpec = workerapp.Spec{
	Name:    warehouse.HandlerName,
	Migrate: warehouse.Migrate,
	Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) { return warehouse.New(d.Inbox) },
}

// checkQueue compares what SQS says of the queue at url with the state's values of r.
func checkQueue(t *testing.T, c *sqs.Client, url string, r resource) {
	t.Helper()
	if r.Address == "" {
		t.Fatalf("no state for %s", url)
	}
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	a := out.Attributes
	num := func(k string) float64 { f, _ := strconv.ParseFloat(a[k], 64); return f }
	for attr, key := range map[string]string{"VisibilityTimeout": "visibility_timeout_seconds",
		"MessageRetentionPeriod": "message_retention_seconds", "ReceiveMessageWaitTimeSeconds": "receive_wait_time_seconds"} {
		if want, _ := r.Values[key].(float64); num(attr) != want {
			t.Errorf("%s: %s is %s, the state says %v", r.Address, attr, a[attr], want)
		}
	}
	if want, _ := r.Values["sqs_managed_sse_enabled"].(bool); (a["SqsManagedSseEnabled"] == "true") != want {
		t.Errorf("%s: SqsManagedSseEnabled %q, the state says %v", r.Address, a["SqsManagedSseEnabled"], want)
	}
	if want, _ := r.Values["redrive_policy"].(string); want != "" {
		if !sameJSON(a["RedrivePolicy"], want) {
			t.Errorf("%s: RedrivePolicy %s, the state says %s", r.Address, a["RedrivePolicy"], want)
		}
	}
	t.Logf("%s: %s read back as the state says (visibility %s s, retention %s s, SSE %s, redrive %s)",
		r.Address, url, a["VisibilityTimeout"], a["MessageRetentionPeriod"], a["SqsManagedSseEnabled"], a["RedrivePolicy"])
}

func sameJSON(a, b string) bool {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xs, _ := json.Marshal(normalise(x))
	ys, _ := json.Marshal(normalise(y))
	return bytes.Equal(xs, ys)
}

// normalise turns numbers written as strings ("5") into numbers, as SQS servers differ there.
func normalise(m map[string]any) map[string]any {
	for k, v := range m {
		if s, ok := v.(string); ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				m[k] = f
			}
		}
	}
	return m
}

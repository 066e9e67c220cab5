package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/reliability"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// TestProcs: a process started through Procs gets Procs.Env and its own variables, its output is
// kept in memory and in its file, Term and Kill end it, and KillAll ends what still runs. No
// server: the processes are sh.
func TestProcs(t *testing.T) {
	t.Parallel()
	ps := &reliability.Procs{Dir: t.TempDir(), Env: []string{"A=from-procs", "B=from-procs"}}
	t.Cleanup(ps.KillAll)
	script := `echo "ready $A $B"; exec sleep 60`
	a, err := ps.Start("a-0", exec.Command("sh", "-c", script), "B=own")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ps.Start("b-0", exec.Command("sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ps.Start("c-0", exec.Command("sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	sqstest.WaitFor(t, 10*time.Second, "a-0 to write its line", func() (bool, string) {
		return strings.Contains(a.Output(), "\n"), fmt.Sprintf("output %q", a.Output())
	})
	if got, want := a.Output(), "ready from-procs own\n"; got != want {
		t.Errorf("a-0 wrote %q, want %q", got, want)
	}
	if got := a.Getenv("B"); got != "own" {
		t.Errorf("a-0's B is %q, want own (its own variables come last)", got)
	}
	if err := a.Term(10 * time.Second); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Errorf("Term: %v, want the exit by SIGTERM", err)
	}
	if done, _ := a.Exited(); !done {
		t.Error("a-0 runs after Term")
	}
	if b, err := os.ReadFile(a.Log); err != nil || string(b) != a.Output() {
		t.Errorf("a-0's file %s holds %q (%v), its output is %q", a.Log, b, err, a.Output())
	}
	b.Kill()
	if done, err := b.Exited(); !done || err == nil {
		t.Errorf("b-0 after Kill: exited %v, %v", done, err)
	}
	if err := b.Term(time.Second); err == nil {
		t.Error("Term of a process that has exited: no error")
	}
	ps.KillAll()
	if done, _ := c.Exited(); !done {
		t.Error("c-0 runs after KillAll")
	}
	if n := len(ps.All()); n != 3 {
		t.Errorf("All: %d processes, want 3", n)
	}
}

// TestSQSProxyTraffic: the proxy counts what SendMessageBatch stored per event id, the
// deliveries and the deletes, and its traps spring and hold where they say. A held publish
// fails with a 502 once released (the SDK's retry then stores the entries again), and so does
// a held delete (the retry deletes). Servers: the package's SQS server, GoAws or fauxqs; on GoAws,
// whose SendMessageBatch answers list no stored entries, nothing counts as published.
func TestSQSProxyTraffic(t *testing.T) {
	// Not parallel: GoAws must not create a queue while other tests' requests are in flight.
	ctx := t.Context()
	q, err := env.SQS.CreateQueueErr(ctx, sqstest.QueueOptions{Prefix: "rel-proxy", VisibilityTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	px, err := reliability.NewSQSProxy(env.SQS.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(px.Endpoint())
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
		worker.PlainRequestBodies(o)
	})
	send := func(events ...string) error {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL)}
		for i, ev := range events {
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(ev),
				MessageAttributes: map[string]types.MessageAttributeValue{
					outbox.EventIDAttribute: {DataType: aws.String("String"), StringValue: aws.String(ev)}}})
		}
		_, err := c.SendMessageBatch(ctx, in)
		return err
	}
	counts := !env.SQS.GoAws

	// A publish held after the server stored it, released: the retry stores it again.
	tr := px.Arm(reliability.AfterPublish, func() bool { return true })
	sent := make(chan error, 1)
	go func() { sent <- send("ev-1", "ev-2") }()
	if !px.Await(tr, 10*time.Second) {
		t.Fatal("the publish trap did not spring")
	}
	select {
	case err := <-sent:
		t.Fatalf("the held publish returned before its release: %v", err)
	case <-time.After(100 * time.Millisecond): // a check that nothing happens, not a synchronisation
	}
	tr.Release()
	if err := <-sent; err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	if err := send("ev-3"); err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	tf := px.Traffic()
	if want := map[string]int{"ev-1": 2, "ev-2": 2, "ev-3": 1}; counts && fmt.Sprint(tf.Published) != fmt.Sprint(want) {
		t.Errorf("published %v, want %v", tf.Published, want)
	}
	if !counts && len(tf.Published) != 0 {
		t.Errorf("published %v on GoAws, whose answers list no entries", tf.Published)
	}

	// Receive everything: the receive trap springs, the deliveries are unsettled.
	tr = px.Arm(reliability.AfterReceive, func() bool { return true })
	var handles []string
	var receives int
	sqstest.WaitFor(t, 20*time.Second, "the 5 messages to be received", func() (bool, string) {
		receives++
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return false, err.Error()
		}
		for _, m := range out.Messages {
			handles = append(handles, aws.ToString(m.ReceiptHandle))
		}
		return len(handles) >= 5, fmt.Sprintf("%d received", len(handles))
	})
	if !px.Await(tr, time.Second) {
		t.Error("the receive trap did not spring")
	}
	if n := px.Unsettled(); n != len(handles) {
		t.Errorf("%d unsettled, want %d", n, len(handles))
	}
	if n, want := px.Traffic().Deliveries(), len(handles); n != want {
		t.Errorf("%d deliveries, want %d", n, want)
	}
	if n := px.Calls().Count("ReceiveMessage"); n != receives {
		t.Errorf("%d ReceiveMessage calls counted, %d made", n, receives)
	}

	del := func(h string) error {
		_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String(h)})
		return err
	}

	// A trap whose condition does not hold never springs.
	tr = px.Arm(reliability.BeforeDelete, func() bool { return false })
	if err := del(handles[0]); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	if px.Await(tr, time.Millisecond) {
		t.Error("a trap sprang while its condition did not hold")
	}

	// A delete held before the server, released: the retry deletes.
	tr = px.Arm(reliability.BeforeDelete, func() bool { return true })
	deleted := make(chan error, 1)
	go func() { deleted <- del(handles[1]) }()
	if !px.Await(tr, 10*time.Second) {
		t.Fatal("the delete trap did not spring")
	}
	if n := px.Traffic().Deleted; n != 1 {
		t.Errorf("%d deleted while the second delete is held, want 1", n)
	}
	tr.Release()
	if err := <-deleted; err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, h := range handles[2:] {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(h)})
	}
	if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries}); err != nil {
		t.Fatal(err)
	}
	if tf := px.Traffic(); tf.Deleted != len(handles) {
		t.Errorf("%d deleted, want %d", tf.Deleted, len(handles))
	}
	if n := px.Unsettled(); n != 0 {
		t.Errorf("%d unsettled after every delete", n)
	}

	// A held call is failed when the proxy closes.
	px2, err := reliability.NewSQSProxy(env.SQS.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c2 := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(px2.Endpoint())
		o.RetryMaxAttempts = 1
		worker.PlainRequestBodies(o)
	})
	tr = px2.Arm(reliability.BeforeDelete, func() bool { return true })
	go func() {
		_, err := c2.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String("made-up")})
		deleted <- err
	}()
	if !px2.Await(tr, 10*time.Second) {
		t.Fatal("the delete trap did not spring")
	}
	px2.Close()
	if err := <-deleted; err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("the held delete, proxy closed: %v, want a failure", err)
	}
}

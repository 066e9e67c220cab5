// Package sqstest gives the test packages of sqsinbox a real SQS-compatible server.
//
// When AWS_ENDPOINT_URL_SQS (or AWS_ENDPOINT_URL) is set, [Start] uses that server (LocalStack,
// or real SQS) unchanged. Otherwise it starts one on a free 127.0.0.1 port, chosen by
// SQSINBOX_TEST_SQS:
//
//   - goaws (the default): GoAws v0.5.4, built from the repository's nested tools module into the
//     user's cache directory (once), with a throwaway config.
//   - fauxqs: fauxqs 2.4.1 and the Node 22 it needs, installed with npm ci from
//     harness/tools/fauxqs into the user's cache directory (once).
//
// Either way it points AWS_ENDPOINT_URL_SQS at the server, so that clients made with the standard
// AWS configuration chain (and child processes) reach it, and the kernel kills the server when
// the test binary dies. Dummy credentials and a region are set when none are present. Tests never
// skip: when no server can be had they fail with the reason. TESTING.md lists each server's quirks.
//
// Against a server the harness did not start, SQSINBOX_TEST_SQS says which one it is (or, as
// before, SQSINBOX_TEST_GOAWS=1 says it is GoAws), so that [Server.Kind] and helpers such as
// [Count] allow for its quirks; unset, it counts as [KindOther].
//
// [StartFauxqsAt] starts fauxqs on a fixed port instead, for `make dev` (harness/cmd/dev).
//
// Queues get unique names and are created one at a time (GoAws crashes when queues are created
// while other requests are in flight), and are never deleted under load.
package sqstest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/worker"
)

const modulePath = "github.com/sqsinbox/sqsinbox"

// Kind says which SQS server the tests run against, so that a test can allow for its quirks.
type Kind string

const (
	// KindGoAws is GoAws v0.5.4.
	KindGoAws Kind = "goaws"
	// KindFauxqs is fauxqs 2.4.1.
	KindFauxqs Kind = "fauxqs"
	// KindOther is a server the harness did not start and was not told about: LocalStack, real
	// SQS, or anything else.
	KindOther Kind = "other"
)

// Server is an SQS-compatible server for the tests.
type Server struct {
	// Endpoint is the server's base URL.
	Endpoint string
	// Kind is the server's kind (see TESTING.md for each one's quirks).
	Kind Kind
	// GoAws is true when Kind is KindGoAws.
	GoAws bool

	cmd     *exec.Cmd
	dir     string
	exited  chan struct{}
	output  Buffer     // the process's stdout and stderr
	mu      sync.Mutex // serialises queue creation
	client  *sqs.Client
	created []string // queue URLs, deleted at Close on a server the harness did not start
	env     func()   // restores the environment Start changed for a server it started
}

// Main starts a server for a test binary, runs its tests and stops the server. Use it from
// TestMain. When no server can be had it prints why and exits 1: the tests fail, never skip.
func Main(m *testing.M, out **Server) {
	s, err := Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*out = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

// Start returns a server: the one the environment names, or one it starts (see the package
// doc). The caller must call Close.
func Start(ctx context.Context) (*Server, error) {
	setDefault("AWS_ACCESS_KEY_ID", "test")
	setDefault("AWS_SECRET_ACCESS_KEY", "test")
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		_ = os.Setenv("AWS_REGION", "us-east-1")
	}
	kind := Kind(os.Getenv(EnvServer))
	switch kind {
	case "", KindGoAws, KindFauxqs:
	default:
		return nil, fmt.Errorf("sqstest: %s=%q: want %s or %s", EnvServer, kind, KindGoAws, KindFauxqs)
	}
	if ep := cmp.Or(os.Getenv("AWS_ENDPOINT_URL_SQS"), os.Getenv("AWS_ENDPOINT_URL")); ep != "" {
		if kind == "" {
			kind = KindOther
			if os.Getenv(envChildGoAws) == "1" {
				kind = KindGoAws
			}
		}
		s := &Server{Endpoint: ep}
		s.setKind(kind)
		return s, s.init(ctx)
	}
	start := startGoAws
	if kind == KindFauxqs {
		start = func(ctx context.Context) (*Server, error) { return startFauxqs(ctx, 0) }
	}
	s, err := start(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqstest: AWS_ENDPOINT_URL_SQS is not set, and %w", err)
	}
	s.env = saveEnv("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL_S3", EnvServer, envChildGoAws)
	_ = os.Setenv("AWS_ENDPOINT_URL_SQS", s.Endpoint)
	// Both servers answer SNS on the same endpoint (sns.go); fauxqs answers S3 there too.
	_ = os.Setenv("AWS_ENDPOINT_URL_SNS", s.Endpoint)
	if s.Kind == KindFauxqs {
		_ = os.Setenv("AWS_ENDPOINT_URL_S3", s.Endpoint)
	}
	s.setKind(s.Kind) // so child processes know which quirks apply
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// EnvServer names the environment variable that picks the server the harness starts (goaws, the
// default, or fauxqs), or says which one AWS_ENDPOINT_URL_SQS names.
const EnvServer = "SQSINBOX_TEST_SQS"

// envChildGoAws is "1" when the server is GoAws. Older than EnvServer, it is still set for the
// test binaries and scripts that read it.
const envChildGoAws = "SQSINBOX_TEST_GOAWS"

// setKind records the server's kind, and exports it to child processes (which reach the same
// server through AWS_ENDPOINT_URL_SQS and build their own Server from the environment).
func (s *Server) setKind(k Kind) {
	s.Kind = k
	s.GoAws = k == KindGoAws
	if k == KindOther {
		_ = os.Unsetenv(EnvServer)
	} else {
		_ = os.Setenv(EnvServer, string(k))
	}
	if s.GoAws {
		_ = os.Setenv(envChildGoAws, "1")
	} else {
		_ = os.Unsetenv(envChildGoAws)
	}
}

func setDefault(k, v string) {
	if os.Getenv(k) == "" {
		_ = os.Setenv(k, v)
	}
}

// init makes the shared client. It passes worker.PlainRequestBodies: without it, the SDK can
// retry a ReceiveMessage whose answer it lost, and a test's own receive then leaves up to ten
// messages invisible for the visibility timeout (TESTING.md; aws-sdk-go-v2 #2737).
func (s *Server) init(ctx context.Context) error {
	c, err := s.NewClient(ctx, worker.PlainRequestBodies)
	if err != nil {
		return err
	}
	s.client = c
	return nil
}

// NewClient returns an SQS client made with the standard AWS configuration chain, which reads
// the endpoint from AWS_ENDPOINT_URL_SQS. optFns are applied to the client's options.
func (s *Server) NewClient(ctx context.Context, optFns ...func(*sqs.Options)) (*sqs.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqstest: load AWS config: %w", err)
	}
	return sqs.NewFromConfig(cfg, optFns...), nil
}

// Client returns the harness's own client.
func (s *Server) Client() *sqs.Client { return s.client }

// Pid returns the process id of the server the harness started (GoAws, or the Node running
// fauxqs), or 0 for a server it did not start.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Close stops the server if the harness started it, and sets back the environment variables
// Start set for it. On a server it did not start (LocalStack, real SQS) it deletes the queues it
// created instead; by then no test sends traffic.
func (s *Server) Close() {
	if s.cmd == nil {
		if s.client == nil {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, u := range s.created {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = s.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
			cancel()
		}
		s.created = nil
		return
	}
	if s.stop() {
		// It died under the tests (GoAws crashes on some concurrent requests): say so, with
		// what it printed, beside the failures this caused.
		fmt.Fprintf(os.Stderr, "sqstest: %s had exited before Close: %s\n", s.Kind, tail(s.output.String(), 4000))
	}
	if s.env != nil {
		s.env() // the endpoint is gone: a later Start in this process starts a new server
		s.env = nil
	}
}

// saveEnv returns a function that sets the variables named back to their present values.
func saveEnv(names ...string) func() {
	type saved struct {
		v  string
		ok bool
	}
	was := make(map[string]saved, len(names))
	for _, n := range names {
		v, ok := os.LookupEnv(n)
		was[n] = saved{v, ok}
	}
	return func() {
		for n, w := range was {
			if w.ok {
				_ = os.Setenv(n, w.v)
			} else {
				_ = os.Unsetenv(n)
			}
		}
	}
}

// Alive reports an error if a server started by the harness has exited (GoAws crashes on some
// concurrent requests), with the end of its output.
func (s *Server) Alive() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		return fmt.Errorf("sqstest: %s exited: %s", s.Kind, tail(s.output.String(), 2000))
	default:
		return nil
	}
}

// Exited returns a channel that is closed when the server the harness started has exited, and
// nil (never ready) for a server it did not start.
func (s *Server) Exited() <-chan struct{} {
	if s.cmd == nil {
		return nil
	}
	return s.exited
}

// Output returns what the server the harness started has printed so far (stdout and stderr;
// GoAws logs warnings, fauxqs only errors), for a test to show when it fails.
func (s *Server) Output() string { return s.output.String() }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// repoRoot walks up from the working directory to the go.mod of the sqsinbox module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
					if strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath {
						f.Close()
						return dir, nil
					}
					break
				}
			}
			f.Close()
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// QueueOptions says what queue [Server.CreateQueue] makes.
type QueueOptions struct {
	// Prefix starts the queue's name; a random suffix makes it unique.
	Prefix string
	// FIFO makes a FIFO queue (its name ends in .fifo).
	FIFO bool
	// VisibilityTimeout is the queue's visibility timeout. 0 means 30 s.
	VisibilityTimeout time.Duration
	// Retention is the queue's MessageRetentionPeriod. 0 means 4 days.
	Retention time.Duration
	// MaxReceiveCount, if positive, gives the queue a DLQ (with a longer retention) and a redrive
	// policy with this maxReceiveCount.
	MaxReceiveCount int
}

// Queue is a queue made by [Server.CreateQueue].
type Queue struct {
	Name   string
	URL    string
	DLQURL string // empty when it has no DLQ
}

// CreateQueue creates a uniquely named queue (and its DLQ when asked), one at a time.
func (s *Server) CreateQueue(t testing.TB, o QueueOptions) *Queue {
	t.Helper()
	q, err := s.CreateQueueErr(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// CreateQueueErr is CreateQueue for callers without a testing.TB.
func (s *Server) CreateQueueErr(ctx context.Context, o QueueOptions) (*Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := cmp.Or(o.Prefix, "q") + "-" + randomSuffix()
	vis := o.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	ret := o.Retention
	if ret == 0 {
		ret = 4 * 24 * time.Hour
	}
	suffix := ""
	if o.FIFO {
		suffix = ".fifo"
	}
	attrs := map[string]string{
		"VisibilityTimeout":      strconv.Itoa(int(vis / time.Second)),
		"MessageRetentionPeriod": strconv.Itoa(int(ret / time.Second)),
		"MaximumMessageSize":     "262144",
		"DelaySeconds":           "0",
	}
	if o.FIFO {
		attrs["FifoQueue"] = "true"
	}
	q := &Queue{Name: name + suffix}
	if o.MaxReceiveCount > 0 {
		dlqAttrs := map[string]string{
			"VisibilityTimeout":      attrs["VisibilityTimeout"],
			"MessageRetentionPeriod": strconv.Itoa(14 * 24 * 3600),
			"MaximumMessageSize":     "262144",
			"DelaySeconds":           "0",
		}
		if o.FIFO {
			dlqAttrs["FifoQueue"] = "true"
		}
		out, err := s.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq" + suffix), Attributes: dlqAttrs})
		if err != nil {
			return nil, s.wrap("create DLQ", err)
		}
		q.DLQURL = aws.ToString(out.QueueUrl)
		s.created = append(s.created, q.DLQURL)
		da, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			return nil, s.wrap("read DLQ ARN", err)
		}
		rp, _ := json.Marshal(map[string]string{
			"deadLetterTargetArn": da.Attributes["QueueArn"],
			"maxReceiveCount":     strconv.Itoa(o.MaxReceiveCount),
		})
		attrs["RedrivePolicy"] = string(rp)
	}
	out, err := s.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.Name), Attributes: attrs})
	if err != nil {
		return nil, s.wrap("create queue", err)
	}
	q.URL = aws.ToString(out.QueueUrl)
	s.created = append(s.created, q.URL)
	return q, nil
}

func (s *Server) wrap(what string, err error) error {
	if aerr := s.Alive(); aerr != nil {
		return fmt.Errorf("sqstest: %s: %w (%w)", what, err, aerr)
	}
	return fmt.Errorf("sqstest: %s: %w", what, err)
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Message is one message for [Send].
type Message struct {
	Body       string
	Attributes map[string]string // String message attributes
	Numbers    map[string]string // Number message attributes
	GroupID    string            // FIFO only
	DedupID    string            // FIFO only
}

// Sender is the part of the SQS API that [Send] uses.
type Sender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Send sends msgs to the queue at url in batches of ten. GoAws returns empty Successful and
// Failed lists, so only the call's error is checked.
func Send(ctx context.Context, c Sender, url string, msgs []Message) error {
	for len(msgs) > 0 {
		n := min(10, len(msgs))
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, m := range msgs[:n] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.Body)}
			if len(m.Attributes)+len(m.Numbers) > 0 {
				e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.Attributes)+len(m.Numbers))
				for k, v := range m.Attributes {
					e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
				}
				for k, v := range m.Numbers {
					e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
				}
			}
			if m.GroupID != "" {
				e.MessageGroupId = aws.String(m.GroupID)
			}
			if m.DedupID != "" {
				e.MessageDeduplicationId = aws.String(m.DedupID)
			}
			entries[i] = e
		}
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return fmt.Errorf("sqstest: send: %w", err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("sqstest: send: %d entries failed, first: %s %s", len(out.Failed),
				aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
		}
		msgs = msgs[n:]
	}
	return nil
}

// Counter is the part of the SQS API that [Count] uses.
type Counter interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Count returns the number of messages in the queue, visible, in flight or delayed. GoAws counts
// in-flight messages in ApproximateNumberOfMessages already (and again in ...NotVisible), so
// against it (SQSINBOX_TEST_GOAWS=1, set by Start) only that one is read.
func Count(ctx context.Context, c Counter, url string) (int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, err
	}
	keys := []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"}
	if os.Getenv(envChildGoAws) == "1" {
		keys = keys[:1]
	}
	n := 0
	for _, k := range keys {
		v, _ := strconv.Atoi(out.Attributes[k])
		n += v
	}
	return n, nil
}

// WaitFor polls cond every 20 ms until it returns true or timeout passes, and fails t then with
// what cond last said.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

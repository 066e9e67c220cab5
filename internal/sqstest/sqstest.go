// Package sqstest gives the test packages of sqsinbox a real SQS-compatible server.
//
// When AWS_ENDPOINT_URL_SQS (or AWS_ENDPOINT_URL) is set, [Start] uses that server (LocalStack,
// or real SQS) unchanged. Otherwise it builds GoAws v0.5.4 from the repository's nested tools
// module into the user's cache directory (once), starts it on a free 127.0.0.1 port with a
// throwaway config, and points AWS_ENDPOINT_URL_SQS at it, so that clients made with the standard
// AWS configuration chain (and child processes) reach it. Dummy credentials and a region are set
// when none are present. Tests never skip: when no server can be had they fail with the reason.
//
// Against an external GoAws, also set SQSINBOX_TEST_GOAWS=1 so that helpers such as [Count]
// allow for its quirks.
//
// Queues get unique names and are created one at a time (GoAws crashes when queues are created
// while other requests are in flight), and are never deleted under load.
package sqstest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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

// GoAwsVersion is the GoAws version the harness builds.
const GoAwsVersion = "v0.5.4"

const modulePath = "github.com/sqsinbox/sqsinbox"

// Server is an SQS-compatible server for the tests.
type Server struct {
	// Endpoint is the server's base URL.
	Endpoint string
	// GoAws is true when the harness started GoAws itself (its quirks then apply; see
	// EMULATORS.md).
	GoAws bool

	cmd     *exec.Cmd
	dir     string
	exited  chan struct{}
	stderr  *bytes.Buffer
	mu      sync.Mutex // serialises queue creation
	client  *sqs.Client
	created []string // queue URLs, deleted at Close on a server the harness did not start
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

// Start returns a server: the one the environment names, or a GoAws it starts. The caller must
// call Close.
func Start(ctx context.Context) (*Server, error) {
	setDefault("AWS_ACCESS_KEY_ID", "test")
	setDefault("AWS_SECRET_ACCESS_KEY", "test")
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		_ = os.Setenv("AWS_REGION", "us-east-1")
	}
	if ep := cmpOr(os.Getenv("AWS_ENDPOINT_URL_SQS"), os.Getenv("AWS_ENDPOINT_URL")); ep != "" {
		s := &Server{Endpoint: ep, GoAws: os.Getenv(envChildGoAws) == "1"}
		return s, s.init(ctx)
	}
	bin, err := goawsBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqstest: AWS_ENDPOINT_URL_SQS is not set and GoAws %s could not be built: %w", GoAwsVersion, err)
	}
	s, err := startGoAws(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("sqstest: AWS_ENDPOINT_URL_SQS is not set and GoAws %s could not be started: %w", GoAwsVersion, err)
	}
	_ = os.Setenv("AWS_ENDPOINT_URL_SQS", s.Endpoint)
	_ = os.Setenv(envChildGoAws, "1") // so child processes know the quirks apply
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

const envChildGoAws = "SQSINBOX_TEST_GOAWS"

func setDefault(k, v string) {
	if os.Getenv(k) == "" {
		_ = os.Setenv(k, v)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// init makes the shared client. It passes worker.PlainRequestBodies: without it, the SDK can
// retry a ReceiveMessage whose answer it lost, and a test's own receive then leaves up to ten
// messages invisible for the visibility timeout (EMULATORS.md; aws-sdk-go-v2 #2737).
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

// Pid returns the process id of the GoAws the harness started, or 0 for a server it did not
// start.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Close stops the server if the harness started it. On a server it did not start (LocalStack,
// real SQS) it deletes the queues it created instead; by then no test sends traffic.
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
	_ = s.cmd.Process.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
	s.cmd = nil
}

// Alive reports an error if a GoAws started by the harness has exited (it crashes on some
// concurrent requests), with the end of its output.
func (s *Server) Alive() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		return fmt.Errorf("sqstest: GoAws exited: %s", tail(s.stderr.String(), 2000))
	default:
		return nil
	}
}

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

var buildMu sync.Mutex

// goawsBinary returns the cached GoAws binary, building it first if needed.
func goawsBinary(ctx context.Context) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "sqsinbox", "goaws-"+GoAwsVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// Build to a temporary name and rename, so concurrent test binaries never run half a file.
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-C", filepath.Join(root, "internal", "tools", "goaws"),
		"-o", tmp, "github.com/Admiral-Piett/goaws/app/cmd")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startGoAws(ctx context.Context, bin string) (*Server, error) {
	var lastErr error
	for range 3 { // the free port can be taken between the probe and GoAws's listen
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := tryGoAws(ctx, bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryGoAws(ctx context.Context, bin string, port int) (*Server, error) {
	dir, err := os.MkdirTemp("", "sqstest-goaws-")
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`Test:
  Host: 127.0.0.1
  Port: "%d"
  Region: us-east-1
  AccountId: "000000000000"
  LogToFile: false
  EnableDuplicates: true
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 262144
  Queues: []
  Topics: []
`, port)
	cfgPath := filepath.Join(dir, "goaws.yaml")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), GoAws: true, dir: dir,
		exited: make(chan struct{}), stderr: new(bytes.Buffer)}
	s.cmd = exec.Command(bin, "-config", cfgPath, "-loglevel", "warn", "Test")
	s.cmd.SysProcAttr = procAttr()
	s.cmd.Dir = dir
	s.cmd.Stdout = s.stderr
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("GoAws exited at start: %s", tail(s.stderr.String(), 2000))
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("GoAws did not answer /health within 30 s: %s", tail(s.stderr.String(), 2000))
		}
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
	name := cmpOr(o.Prefix, "q") + "-" + randomSuffix()
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
			if len(m.Attributes) > 0 {
				e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.Attributes))
				for k, v := range m.Attributes {
					e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
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

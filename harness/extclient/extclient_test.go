package extclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/extclient"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
)

var (
	endpoint string
	sqsc     *sqs.Client
	s3c      *s3.Client
	bucket   = "extclient-test"
)

// TestMain starts a fauxqs of its own (SQS and S3 on one endpoint) on a free loopback port,
// makes the bucket, and installs the kit before any test runs.
func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	ctx := context.Background()
	srv, err := startFauxqs(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	endpoint = srv.Endpoint
	creds := credentials.NewStaticCredentialsProvider("test", "test", "")
	sqsc = sqs.New(sqs.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(endpoint)}, worker.PlainRequestBodies)
	s3c = s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), UsePathStyle: true})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		fmt.Fprintln(os.Stderr, "create bucket:", err)
		return 1
	}
	if _, err := extclient.Install(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startFauxqs starts fauxqs on a free port, trying another if one is taken meanwhile.
func startFauxqs(ctx context.Context) (*sqstest.Server, error) {
	var err error
	for range 5 {
		var l net.Listener
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		var s *sqstest.Server
		s, err = sqstest.StartFauxqsAt(ctx, port)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, sqstest.ErrPortTaken) {
			return nil, err
		}
	}
	return nil, err
}

var queues atomic.Int64

// queue creates a queue of a name unique to the test.
func queue(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("extclient-%d-%s", queues.Add(1), regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "-"))
	if len(name) > 80 {
		name = name[:80]
	}
	out, err := sqsc.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return *out.QueueUrl
}

// payload returns a compact JSON body of about n bytes, over SQS's 256 KiB when n is.
func payload(t *testing.T, n int) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]string{"id": "evt-" + t.Name(), "pad": strings.Repeat("x", n)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func objectExists(t *testing.T, key string) bool {
	t.Helper()
	_, err := s3c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err == nil {
		return true
	}
	var nf interface{ ErrorCode() string }
	if errors.As(err, &nf) && (nf.ErrorCode() == "NotFound" || nf.ErrorCode() == "NoSuchKey") {
		return false
	}
	t.Fatalf("head %s: %v", key, err)
	return false
}

// queueEmpty checks that no message is left on the queue, visible or in flight.
func queueEmpty(t *testing.T, url string) {
	t.Helper()
	out, err := sqsc.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range out.Attributes {
		if v != "0" {
			t.Errorf("queue attribute %s = %s, want 0", k, v)
		}
	}
}

var uuidKey = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestRoundTrip sends through the library and receives through it: the same payload comes
// back, the library deletes the SQS message, and the S3 object is left in place.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	q := queue(t)
	body := payload(t, 300<<10)
	sent, err := extclient.Send(t.Context(), endpoint, q, bucket, body)
	if err != nil {
		t.Fatal(err)
	}
	if sent.MessageID == "" || sent.Bucket != bucket || !uuidKey.MatchString(sent.Key) {
		t.Errorf("sent %+v: want a message id, bucket %s and a UUID key", sent, bucket)
	}
	if sent.Size != int64(len(body)) || sent.SHA256 != sum(body) {
		t.Errorf("sent size %d sha256 %s, want %d %s (the body unchanged)", sent.Size, sent.SHA256, len(body), sum(body))
	}

	got, err := extclient.Receive(t.Context(), endpoint, q, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if got.MessageID != sent.MessageID {
		t.Errorf("received message %s, sent %s", got.MessageID, sent.MessageID)
	}
	if !got.Resolved || got.Size != int64(len(body)) || got.SHA256 != sum(body) {
		t.Errorf("received resolved=%v size %d sha256 %s, want the payload (%d %s)", got.Resolved, got.Size, got.SHA256, len(body), sum(body))
	}
	if got.Bucket != bucket || got.Key != sent.Key {
		t.Errorf("received pointer %s/%s, want %s/%s", got.Bucket, got.Key, bucket, sent.Key)
	}
	if !got.ObjectExists || !objectExists(t, sent.Key) {
		t.Errorf("the S3 object is gone after the receive (script says exists=%v)", got.ObjectExists)
	}
	if !got.Deleted {
		t.Error("the library did not delete the SQS message")
	}
	want := map[string]extclient.Attribute{extclient.SizeAttribute: {DataType: "Number", StringValue: strconv.Itoa(len(body))}}
	if !mapsEqual(got.Attributes, want) {
		t.Errorf("attributes %v, want %v", got.Attributes, want)
	}
	queueEmpty(t, q)
}

// TestSendReadByPlainSDK reads what the library sends with aws-sdk-go-v2 alone, recording
// exactly the body and the attributes it writes.
func TestSendReadByPlainSDK(t *testing.T) {
	t.Parallel()
	q := queue(t)
	body := payload(t, 300<<10)
	sent, err := extclient.Send(t.Context(), endpoint, q, bucket, body)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sqsc.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String(q),
		MaxNumberOfMessages:   1,
		WaitTimeSeconds:       10,
		MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(out.Messages))
	}
	m := out.Messages[0]

	// The body is the pointer, compact, in this order: byte for byte.
	wantBody := `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"` + bucket + `","s3Key":"` + sent.Key + `"}]`
	if aws.ToString(m.Body) != wantBody {
		t.Errorf("body %s\nwant %s", aws.ToString(m.Body), wantBody)
	}
	var ptr []json.RawMessage
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &ptr); err != nil || len(ptr) != 2 {
		t.Fatalf("body %s is no two-element array: %v", aws.ToString(m.Body), err)
	}
	var class string
	var loc struct {
		Bucket string `json:"s3BucketName"`
		Key    string `json:"s3Key"`
	}
	if err := json.Unmarshal(ptr[0], &class); err != nil || class != extclient.PointerClass {
		t.Errorf("pointer class %s, want %q", ptr[0], extclient.PointerClass)
	}
	if err := json.Unmarshal(ptr[1], &loc); err != nil || loc.Bucket != bucket || loc.Key != sent.Key {
		t.Errorf("pointer location %s, want %s/%s", ptr[1], bucket, sent.Key)
	}

	// One attribute: SQSLargePayloadSize, a Number, the payload's size. No ExtendedPayloadSize.
	if len(m.MessageAttributes) != 1 {
		t.Errorf("attributes %v, want %s alone", keys(m.MessageAttributes), extclient.SizeAttribute)
	}
	a, ok := m.MessageAttributes[extclient.SizeAttribute]
	if !ok || aws.ToString(a.DataType) != "Number" || aws.ToString(a.StringValue) != strconv.Itoa(len(body)) {
		t.Errorf("%s = %+v, want Number %d", extclient.SizeAttribute, a, len(body))
	}

	// The object holds the payload, as JSON.
	obj, err := s3c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(sent.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Body.Close() }()
	stored, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, body) {
		t.Errorf("object holds %d bytes (sha256 %s), want the body's %d (%s)", len(stored), sum(stored), len(body), sum(body))
	}
	if ct := aws.ToString(obj.ContentType); ct != "application/json" {
		t.Errorf("object Content-Type %q, want application/json", ct)
	}
}

// TestSendStoresJSONStringify: the library stores JSON.stringify of the body, so a body that is
// not compact JSON is stored compacted, and a body that is not JSON is refused.
func TestSendStoresJSONStringify(t *testing.T) {
	t.Parallel()
	q := queue(t)
	sent, err := extclient.Send(t.Context(), endpoint, q, bucket, []byte("{ \"a\" : [1, 2],\n \"b\": \"x\" }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if compact := []byte(`{"a":[1,2],"b":"x"}`); sent.Size != int64(len(compact)) || sent.SHA256 != sum(compact) {
		t.Errorf("stored size %d sha256 %s, want the compact form's %d %s", sent.Size, sent.SHA256, len(compact), sum(compact))
	}
	if _, err := extclient.Send(t.Context(), endpoint, q, bucket, []byte("not json")); err == nil {
		t.Error("Send of a body that is not JSON: no error")
	}
}

// TestReceivePointerWrittenByGo sends pointers as a Go writer would, to an object put with
// aws-sdk-go-v2, and records which ones the library resolves: only those that carry
// SQSLargePayloadSize; the class name it does not check.
func TestReceivePointerWrittenByGo(t *testing.T) {
	t.Parallel()
	body := payload(t, 1<<10)
	size := strconv.Itoa(len(body))
	num := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(v)}
	}
	cases := []struct {
		name     string
		class    string
		attrs    map[string]sqstypes.MessageAttributeValue
		resolved bool
	}{
		{"ExtendedPayloadSize alone", extclient.PointerClass, map[string]sqstypes.MessageAttributeValue{"ExtendedPayloadSize": num(size)}, false},
		{"SQSLargePayloadSize", extclient.PointerClass, map[string]sqstypes.MessageAttributeValue{"SQSLargePayloadSize": num(size)}, true},
		{"both attributes", extclient.PointerClass, map[string]sqstypes.MessageAttributeValue{"ExtendedPayloadSize": num(size), "SQSLargePayloadSize": num(size)}, true},
		{"legacy class", "com.amazon.sqs.javamessaging.MessageS3Pointer", map[string]sqstypes.MessageAttributeValue{"SQSLargePayloadSize": num(size)}, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := queue(t)
			key := fmt.Sprintf("go-writer/%s/%d", strings.ReplaceAll(t.Name(), "/", "-"), i)
			if _, err := s3c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatal(err)
			}
			ptr, err := json.Marshal([]any{c.class, map[string]string{"s3BucketName": bucket, "s3Key": key}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sqsc.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(string(ptr)), MessageAttributes: c.attrs}); err != nil {
				t.Fatal(err)
			}
			got, err := extclient.Receive(t.Context(), endpoint, q, bucket)
			if err != nil {
				t.Fatal(err)
			}
			if got.Resolved != c.resolved {
				t.Errorf("resolved = %v, want %v", got.Resolved, c.resolved)
			}
			want := body
			if !c.resolved {
				want = ptr // handed over as it came
			}
			if got.Size != int64(len(want)) || got.SHA256 != sum(want) {
				t.Errorf("handler got size %d sha256 %s, want %d %s", got.Size, got.SHA256, len(want), sum(want))
			}
			if got.Bucket != bucket || got.Key != key || !got.ObjectExists || !objectExists(t, key) {
				t.Errorf("pointer %s/%s exists=%v: want %s/%s, still there", got.Bucket, got.Key, got.ObjectExists, bucket, key)
			}
			if len(got.Attributes) != len(c.attrs) {
				t.Errorf("the library saw attributes %v, want %v", got.Attributes, keys(c.attrs))
			}
			if !got.Deleted {
				t.Error("the library did not delete the SQS message")
			}
			queueEmpty(t, q)
		})
	}
}

// TestReceiveMissingObject records what the library does with a pointer to an object that is
// not there: it reports the failed fetch (an s3-payload-error event, so ErrLibrary here), yet
// hands its handler the pointer as the body and deletes the message.
func TestReceiveMissingObject(t *testing.T) {
	t.Parallel()
	q := queue(t)
	ptr := `["` + extclient.PointerClass + `",{"s3BucketName":"` + bucket + `","s3Key":"missing/object"}]`
	if _, err := sqsc.SendMessage(t.Context(), &sqs.SendMessageInput{
		QueueUrl:    aws.String(q),
		MessageBody: aws.String(ptr),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			extclient.SizeAttribute: {DataType: aws.String("Number"), StringValue: aws.String("10")},
		},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := extclient.Receive(t.Context(), endpoint, q, bucket)
	if !errors.Is(err, extclient.ErrLibrary) || len(got.Errors) == 0 || !strings.HasPrefix(got.Errors[0], "s3-payload-error:") {
		t.Fatalf("Receive: %v (errors %q), want ErrLibrary with an s3-payload-error", err, got.Errors)
	}
	if got.Resolved || got.SHA256 != sum([]byte(ptr)) || got.ObjectExists || !got.Deleted {
		t.Errorf("resolved=%v body sha256 %s exists=%v deleted=%v: want the pointer handed over unresolved and the message deleted",
			got.Resolved, got.SHA256, got.ObjectExists, got.Deleted)
	}
	queueEmpty(t, q)
}

// TestReceiveNoMessage: an empty queue gives ErrNoMessage after the 10 s wait.
func TestReceiveNoMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the receive's 10 s")
	}
	t.Parallel()
	q := queue(t)
	if _, err := extclient.Receive(t.Context(), endpoint, q, bucket); !errors.Is(err, extclient.ErrNoMessage) {
		t.Fatalf("Receive from an empty queue: %v, want ErrNoMessage", err)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func mapsEqual(a, b map[string]extclient.Attribute) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Package extclient runs a third-party SQS extended client, so that tests can check that
// messages in the large-payload format of AWS's SQS extended client libraries, written by that
// client, are read by sqsinbox, and that sqsinbox's are read by it.
//
// The client is the npm package @5app/sns-sqs-big-payload 1.0.1 (aws-sdk v3), in its
// extendedLibraryCompatibility mode, driven by the two scripts of harness/tools/extclient and
// installed from its committed lock file with npm ci into the user's cache directory, the way
// harness/sqstest installs fauxqs. It runs on the Node that fauxqs's lock file pins.
//
// What that library writes (SqsProducer.sendJSON, with allPayloadThoughS3):
//   - the payload as an S3 object whose key is a random UUID (no suffix), Content-Type
//     application/json, holding JSON.stringify of the value sent: it sends JSON values only;
//   - the SQS body ["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"B","s3Key":"K"}]
//     (compact, in that order: [PointerClass]);
//   - one message attribute, SQSLargePayloadSize ([SizeAttribute]), DataType Number, the
//     payload's size in bytes. It never writes ExtendedPayloadSize.
//
// What it reads (SqsConsumer with getPayloadFromS3 and extendedLibraryCompatibility): a body is
// taken for a pointer only when the message carries SQSLargePayloadSize, whatever its value; a
// message with ExtendedPayloadSize alone is handed over as it is, pointer and all. It then wants a
// two-element JSON array whose second element has non-empty s3BucketName and s3Key; it does not
// check the class name, so the legacy com.amazon.sqs.javamessaging.MessageS3Pointer passes too.
// It fetches any bucket the pointer names, and reads the object as UTF-8 text. It never deletes
// an S3 object: the package has no code that does, and so no option to turn it off. It deletes
// the SQS message after its handler (processMessage's deleteAfterProcessing, default true).
package extclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	// Library is the npm package this kit runs, and LibraryVersion its pinned version.
	Library        = "@5app/sns-sqs-big-payload"
	LibraryVersion = "1.0.1"
	// SizeAttribute is the only size attribute Library writes, and the one it needs to
	// recognise a pointer (the extended clients' legacy name; it ignores ExtendedPayloadSize).
	SizeAttribute = "SQSLargePayloadSize"
	// PointerClass is the class name Library writes as the pointer's first element.
	PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
)

// ErrNoMessage is the error of [Receive] when no message came within its 10 s wait.
var ErrNoMessage = errors.New("extclient: no message within 10 s")

// ErrLibrary wraps the failures the library reported while it processed a received message
// (a pointer it could not resolve, a payload it could not fetch, a delete that failed).
var ErrLibrary = errors.New("extclient: the library reported errors")

// runTimeout bounds a script whose context has no deadline: a send takes well under a second,
// a receive at most its 10 s wait plus that.
const runTimeout = 2 * time.Minute

// Sent is what [Send] sent.
type Sent struct {
	// MessageID is the SQS message id.
	MessageID string `json:"messageId"`
	// Bucket and Key name the S3 object the library wrote the payload to.
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	// Size and SHA256 (lowercase hex) describe the payload as stored: JSON.stringify of the
	// body, which is the body itself when it is compact JSON as JavaScript writes it.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Attribute is an SQS message attribute's data type and string value.
type Attribute struct {
	DataType    string `json:"dataType"`
	StringValue string `json:"stringValue"`
}

// Received is what [Receive] received, and what the library made of it.
type Received struct {
	// MessageID is the SQS message id.
	MessageID string `json:"messageId"`
	// RawBody is the SQS body as received (the pointer, for an offloaded message).
	RawBody string `json:"rawBody"`
	// Attributes are all the message attributes of the message.
	Attributes map[string]Attribute `json:"attributes"`
	// Resolved is true when the library took the body for a pointer and fetched its object.
	Resolved bool `json:"resolved"`
	// Size and SHA256 (lowercase hex) describe the body the library handed its handler: the
	// payload when Resolved, else RawBody. Both are zero when its handler did not run.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Bucket and Key name the object the pointer names (the library's reading when Resolved,
	// else the body's, if it has a pointer's shape), or are empty.
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	// ObjectExists is whether that object still exists after the library processed the
	// message (checked with HeadObject). False when there is no pointer.
	ObjectExists bool `json:"objectExists"`
	// Deleted is true when the library deleted the SQS message.
	Deleted bool `json:"deleted"`
	// Errors are the failures the library reported (see [ErrLibrary]).
	Errors []string `json:"errors"`
}

// Send sends one message with body through the library, always offloaded to bucket, to the
// queue at queueURL of the SQS and S3 server at endpoint (path-style S3, region us-east-1,
// credentials test/test). body must be JSON: the library sends JSON values only, and stores
// JSON.stringify of the parsed body (see [Sent]).
func Send(ctx context.Context, endpoint, queueURL, bucket string, body []byte) (Sent, error) {
	if !json.Valid(body) {
		return Sent{}, fmt.Errorf("extclient: send: the body is not JSON, and %s sends JSON values only", Library)
	}
	f, err := os.CreateTemp("", "extclient-body-*.json")
	if err != nil {
		return Sent{}, fmt.Errorf("extclient: send: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(body); err != nil {
		_ = f.Close()
		return Sent{}, fmt.Errorf("extclient: send: %w", err)
	}
	if err := f.Close(); err != nil {
		return Sent{}, fmt.Errorf("extclient: send: %w", err)
	}
	var s Sent
	if err := run(ctx, "send.mjs", &s, endpoint, queueURL, bucket, f.Name()); err != nil {
		return Sent{}, fmt.Errorf("extclient: send: %w", err)
	}
	return s, nil
}

// Receive receives one message from the queue at queueURL of the server at endpoint, waiting
// up to 10 s, and has the library process it (resolving a pointer, then deleting the SQS
// message, never the S3 object). bucket is where the payload is expected: a pointer to another
// bucket is reported among the errors. It returns [ErrNoMessage] when no message came, and an
// error wrapping [ErrLibrary], with the Received filled in, when the library reported failures.
func Receive(ctx context.Context, endpoint, queueURL, bucket string) (Received, error) {
	var out struct {
		Got *bool `json:"received"`
		Received
	}
	if err := run(ctx, "receive.mjs", &out, endpoint, queueURL, bucket); err != nil {
		return Received{}, fmt.Errorf("extclient: receive: %w", err)
	}
	if out.Got == nil {
		return Received{}, errors.New("extclient: receive: receive.mjs printed no \"received\" field")
	}
	if !*out.Got {
		return Received{}, ErrNoMessage
	}
	r := out.Received
	if len(r.Errors) > 0 {
		return r, fmt.Errorf("%w: %s", ErrLibrary, strings.Join(r.Errors, "; "))
	}
	return r, nil
}

// run installs the kit if needed and runs one of its scripts with Node, decoding the one JSON
// line it prints into v.
func run(ctx context.Context, script string, v any, args ...string) error {
	dir, err := Install(ctx)
	if err != nil {
		return err
	}
	node, err := nodeBinary(ctx)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, runTimeout)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(node), script, err, tail(stderr.String(), 4000))
	}
	line := bytes.TrimSpace(stdout.Bytes())
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%s printed %q: %w (stderr: %s)", script, tail(string(line), 500), err, tail(stderr.String(), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

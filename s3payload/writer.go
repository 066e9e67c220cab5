package s3payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// PutObjectAPI is the part of the S3 API a [Writer] uses. Its method copies the signature of
// *s3.Client exactly, so an *s3.Client satisfies it with no adapter.
type PutObjectAPI interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

const (
	// DefaultThreshold is WriterConfig.Threshold's default: 262,144 bytes, the size at which
	// AWS's extended clients offload by default (SQS's limit was 256 KiB until 2025; it is 1 MiB
	// now, and SNS's is still 256 KiB).
	DefaultThreshold = 256 << 10
	// DefaultPrefix is WriterConfig.Prefix's default.
	DefaultPrefix = "sqsinbox/"
)

// WriterConfig configures a [Writer].
type WriterConfig struct {
	// S3 writes the objects. Required.
	S3 PutObjectAPI
	// Bucket is the bucket the payloads go to. Required.
	Bucket string
	// Prefix starts every object key, so that a lifecycle rule and the policies can name the
	// payloads alone. Empty means DefaultPrefix ("sqsinbox/"); at most 256 bytes, and not
	// starting with "/".
	Prefix string
	// Threshold is the size in bytes of a message (body and attributes, as SQS counts it) over
	// which its body is offloaded. 0 means DefaultThreshold (262,144).
	Threshold int
	// Always offloads every body, whatever its size.
	Always bool
	// LegacyAttribute writes the size attribute under its old name, SQSLargePayloadSize, for
	// readers that know only that one; the default, ExtendedPayloadSize, is the one current
	// extended clients (and sqsinbox) read, and older Java readers do not.
	LegacyAttribute bool
}

// Writer offloads message bodies to S3 on the sending side. It is safe for concurrent use.
type Writer struct {
	cfg WriterConfig
}

// NewWriter returns a Writer, or an error that names the configuration field at fault.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	switch {
	case cfg.S3 == nil:
		return nil, errors.New("s3payload: WriterConfig.S3 is nil")
	case cfg.Threshold < 0:
		return nil, fmt.Errorf("s3payload: WriterConfig.Threshold is %d; it must be positive (0 means %d)", cfg.Threshold, DefaultThreshold)
	case len(cfg.Prefix) > 256 || strings.HasPrefix(cfg.Prefix, "/"):
		return nil, fmt.Errorf("s3payload: WriterConfig.Prefix %q: at most 256 bytes, not starting with /", cfg.Prefix)
	}
	if err := ValidateBucket(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("s3payload: WriterConfig.Bucket: %w", err)
	}
	return &Writer{cfg: cfg}, nil
}

// Bucket returns the bucket the writer puts payloads in.
func (w *Writer) Bucket() string { return w.cfg.Bucket }

// Needs reports whether a message of size bytes (body and attributes) is offloaded.
func (w *Writer) Needs(size int) bool { return w.cfg.Always || size > w.cfg.Threshold }

// Offloaded is what an offloaded message is sent as: the pointer body and the reserved size
// attribute, which the message must carry (a Number).
type Offloaded struct {
	Pointer Pointer
	// Body is the pointer body that replaces the payload.
	Body string
	// Attribute is the reserved attribute's name, Size its value (the payload's bytes).
	Attribute string
	Size      string
}

// Put writes payload to S3 under the key [ObjectKey] gives for eventID and returns what the
// message is sent as. Putting the same event's same payload again writes the same object.
func (w *Writer) Put(ctx context.Context, eventID string, payload []byte) (Offloaded, error) {
	p := Pointer{Bucket: w.cfg.Bucket, Key: ObjectKey(w.cfg.Prefix, eventID, payload)}
	_, err := w.cfg.S3.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(p.Bucket),
		Key:           aws.String(p.Key),
		Body:          bytes.NewReader(payload),
		ContentLength: aws.Int64(int64(len(payload))),
	})
	if err != nil {
		return Offloaded{}, fmt.Errorf("s3payload: PutObject %s: %w", p, err)
	}
	o := Offloaded{Pointer: p, Body: p.Body(), Attribute: SizeAttribute, Size: strconv.Itoa(len(payload))}
	if w.cfg.LegacyAttribute {
		o.Attribute = LegacySizeAttribute
	}
	return o, nil
}

// ObjectKey returns the object key of an event's payload: prefix, the event id (or, when it has
// characters S3 keys should not carry or is over 200 bytes, "sha256-" and its hash's first 32
// hex digits), "/", and the payload's SHA-256 in hex. A relay that publishes the event again
// writes the same key; a different payload under the same event id gets a key of its own.
func ObjectKey(prefix, eventID string, payload []byte) string {
	sum := sha256.Sum256(payload)
	return prefix + keySafe(eventID) + "/" + hex.EncodeToString(sum[:])
}

// keySafe returns id when every character is one AWS lists as safe in object keys, else a hash.
func keySafe(id string) string {
	ok := id != "" && id != "." && id != ".." && len(id) <= 200
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strings.IndexByte("!-_.*'()", c) >= 0
	}
	if ok {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

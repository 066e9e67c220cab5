package s3payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The pointer classes: the first element of a pointer body.
const (
	// PointerClass is the class the current extended clients write.
	PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
	// LegacyPointerClass is the class older SQS extended clients wrote.
	LegacyPointerClass = "com.amazon.sqs.javamessaging.MessageS3Pointer"
)

// The reserved message attributes that mark an offloaded message: the body is then a pointer to
// the payload, and the attribute's Number value is the payload's size in bytes. Only the
// attribute marks it; a body that merely looks like a pointer is not one.
const (
	// SizeAttribute is the attribute the current extended clients write, shared by the SQS and
	// SNS ones.
	SizeAttribute = "ExtendedPayloadSize"
	// LegacySizeAttribute is the attribute older SQS extended clients write (the Java one still
	// does by default).
	LegacySizeAttribute = "SQSLargePayloadSize"
)

// Pointer is where an offloaded payload is: an object in S3.
type Pointer struct {
	Bucket string `json:"s3BucketName"`
	Key    string `json:"s3Key"`
}

// String returns the pointer as an S3 URI, s3://bucket/key.
func (p Pointer) String() string { return "s3://" + p.Bucket + "/" + p.Key }

// Body returns the message body that points to p, in the current format.
func (p Pointer) Body() string {
	b, err := json.Marshal([]any{PointerClass, p})
	if err != nil { // two strings cannot fail to marshal
		panic(err)
	}
	return string(b)
}

// ErrMalformedPointer is the error of a body that carries the reserved size attribute but is not
// a pointer.
var ErrMalformedPointer = errors.New("s3payload: malformed pointer")

// maxPointerBody bounds the body parsed as a pointer: a class name, a bucket name (63 bytes) and
// a key (1,024 bytes), escaped, fit well within it.
const maxPointerBody = 16 << 10

// ParsePointer reads a pointer body: a JSON array of a known pointer class and an object with
// s3BucketName and s3Key.
func ParsePointer(body []byte) (Pointer, error) {
	var p Pointer
	if len(body) > maxPointerBody {
		return p, fmt.Errorf("%w: the body is %d bytes; a pointer is at most %d", ErrMalformedPointer, len(body), maxPointerBody)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(body, &parts); err != nil {
		return p, fmt.Errorf("%w: the body is not a JSON array [class, {s3BucketName, s3Key}]: %w", ErrMalformedPointer, err)
	}
	if len(parts) != 2 {
		return p, fmt.Errorf("%w: the body is a JSON array of %d elements; want 2, [class, {s3BucketName, s3Key}]", ErrMalformedPointer, len(parts))
	}
	var class string
	if err := json.Unmarshal(parts[0], &class); err != nil || (class != PointerClass && class != LegacyPointerClass) {
		return p, fmt.Errorf("%w: its class is %.100s; want %q or %q", ErrMalformedPointer, parts[0], PointerClass, LegacyPointerClass)
	}
	dec := json.NewDecoder(bytes.NewReader(parts[1]))
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%w: its second element is not an object {s3BucketName, s3Key}: %w", ErrMalformedPointer, err)
	}
	switch {
	case p.Bucket == "":
		return p, fmt.Errorf("%w: s3BucketName is missing or empty", ErrMalformedPointer)
	case p.Key == "":
		return p, fmt.Errorf("%w: s3Key is missing or empty (bucket %s)", ErrMalformedPointer, p.Bucket)
	case len(p.Key) > 1024:
		return p, fmt.Errorf("%w: s3Key is %d bytes; S3 keys are at most 1024 (bucket %s)", ErrMalformedPointer, len(p.Key), p.Bucket)
	}
	return p, nil
}

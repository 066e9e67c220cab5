package s3payload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/s3payload"
)

// These tests need no server: the pointer format, object keys and configuration errors.

// TestParsePointer: the current and the legacy class are read; everything else that carries the
// size attribute but is not a pointer is refused with a reason.
func TestParsePointer(t *testing.T) {
	for _, body := range []string{
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b-1","s3Key":"k/1"}]`,
		`["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3BucketName":"b-1","s3Key":"k/1"}]`,
		` [ "software.amazon.payloadoffloading.PayloadS3Pointer" , {"s3Key":"k/1","s3BucketName":"b-1","extra":true} ] `,
	} {
		p, err := s3payload.ParsePointer([]byte(body))
		if err != nil || p.Bucket != "b-1" || p.Key != "k/1" {
			t.Errorf("ParsePointer(%s) = %+v, %v; want b-1, k/1", body, p, err)
		}
	}
	for body, why := range map[string]string{
		`{"s3BucketName":"b","s3Key":"k"}`:                                                                                        "not a JSON array",
		`["software.amazon.payloadoffloading.PayloadS3Pointer"]`:                                                                  "array of 1 elements",
		`["java.lang.String",{"s3BucketName":"b","s3Key":"k"}]`:                                                                   "its class is",
		`["software.amazon.payloadoffloading.PayloadS3Pointer","s3://b/k"]`:                                                       "not an object",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]`:                                                    "s3BucketName is missing",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b"}]`:                                             "s3Key is missing",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"` + strings.Repeat("k", 1025) + `"}]`: "s3Key is 1025 bytes",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"}`:                                  "not a JSON array",
		strings.Repeat(" ", 20000): "a pointer is at most",
	} {
		_, err := s3payload.ParsePointer([]byte(body))
		if !errors.Is(err, s3payload.ErrMalformedPointer) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParsePointer(%.80s) = %v; want ErrMalformedPointer saying %q", body, err, why)
		}
	}
	p := s3payload.Pointer{Bucket: "payloads", Key: `a/"quoted"\key`}
	if got, err := s3payload.ParsePointer([]byte(p.Body())); err != nil || got != p {
		t.Errorf("ParsePointer(Body()) = %+v, %v; want %+v", got, err, p)
	}
	if want := `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"payloads","s3Key":"k"}]`; (s3payload.Pointer{Bucket: "payloads", Key: "k"}).Body() != want {
		t.Errorf("Body() = %s; want %s", (s3payload.Pointer{Bucket: "payloads", Key: "k"}).Body(), want)
	}
}

// TestObjectKey: the key is the prefix, the event id (hashed when unsafe) and the payload's
// SHA-256; the same event and payload give the same key, a different payload another.
func TestObjectKey(t *testing.T) {
	const sumABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := s3payload.ObjectKey("p/", "evt_1", []byte("abc")); got != "p/evt_1/"+sumABC {
		t.Errorf("ObjectKey = %s", got)
	}
	if s3payload.ObjectKey("p/", "evt_1", []byte("abc")) == s3payload.ObjectKey("p/", "evt_1", []byte("abd")) {
		t.Error("two payloads of one event share a key")
	}
	for _, id := range []string{"../etc", "a b", "é", strings.Repeat("x", 201), ".", "..", "a/b"} {
		k := s3payload.ObjectKey("p/", id, []byte("abc"))
		if !strings.HasPrefix(k, "p/sha256-") || strings.Count(k, "/") != 2 || len(k) != len("p/sha256-")+32+1+64 {
			t.Errorf("ObjectKey(%q) = %s; want p/sha256-<32 hex>/<64 hex>", id, k)
		}
	}
}

// TestConfigErrors: each bad configuration is refused with the field named.
func TestConfigErrors(t *testing.T) {
	var c fakeS3
	for _, tc := range []struct {
		cfg  s3payload.ReaderConfig
		want string
	}{
		{s3payload.ReaderConfig{Buckets: []string{"abc"}}, "ReaderConfig.S3 is nil"},
		{s3payload.ReaderConfig{S3: c}, "ReaderConfig.Buckets is empty"},
		{s3payload.ReaderConfig{S3: c, Buckets: []string{"Bad_Bucket"}}, `ReaderConfig.Buckets: bucket name "Bad_Bucket"`},
		{s3payload.ReaderConfig{S3: c, Buckets: []string{"ab"}}, "3 to 63"},
		{s3payload.ReaderConfig{S3: c, Buckets: []string{"abc"}, MaxPayload: -1}, "MaxPayload is -1"},
		{s3payload.ReaderConfig{S3: c, Buckets: []string{"abc"}, MaxPayload: 10, MaxHeld: 5}, "MaxHeld is 5; it must be at least MaxPayload (10)"},
		{s3payload.ReaderConfig{S3: c, Buckets: []string{"abc"}, Concurrency: -1}, "Concurrency is -1"},
	} {
		if _, err := s3payload.NewReader(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewReader(%+v) = %v; want %q", tc.cfg, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cfg  s3payload.WriterConfig
		want string
	}{
		{s3payload.WriterConfig{Bucket: "abc"}, "WriterConfig.S3 is nil"},
		{s3payload.WriterConfig{S3: c}, "WriterConfig.Bucket"},
		{s3payload.WriterConfig{S3: c, Bucket: "-abc"}, "start and end with a letter or digit"},
		{s3payload.WriterConfig{S3: c, Bucket: "abc", Threshold: -1}, "Threshold is -1"},
		{s3payload.WriterConfig{S3: c, Bucket: "abc", Prefix: "/p"}, "Prefix"},
	} {
		if _, err := s3payload.NewWriter(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWriter(%+v) = %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

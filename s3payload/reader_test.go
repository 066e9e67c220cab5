package s3payload_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// Tests of the Reader against the pass's server's S3 (fauxqs; on GoAws, which has no S3, they
// skip and say so).

var srv *sqstest.Server

func TestMain(m *testing.M) { sqstest.Main(m, &srv) }

type kit struct {
	bucket string
	w      *s3payload.Writer
	newR   func(s3payload.ReaderConfig) *s3payload.Reader
}

func setup(t *testing.T) *kit {
	t.Helper()
	srv.Need(t, sqstest.S3)
	c, err := srv.S3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := srv.CreateBucket(t.Context(), c, "reader")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s3payload.NewWriter(s3payload.WriterConfig{S3: c, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	return &kit{bucket: bucket, w: w, newR: func(cfg s3payload.ReaderConfig) *s3payload.Reader {
		cfg.S3, cfg.Buckets = c, []string{bucket}
		r, err := s3payload.NewReader(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}}
}

// message puts payload and returns the message that points to it, its size attribute named attr.
func (k *kit) message(t *testing.T, id string, payload []byte, attr string) *worker.Message {
	t.Helper()
	o, err := k.w.Put(t.Context(), id, payload)
	if err != nil {
		t.Fatal(err)
	}
	return &worker.Message{Body: []byte(o.Body), Attributes: map[string]types.MessageAttributeValue{
		attr:       {DataType: aws.String("Number"), StringValue: aws.String(o.Size)},
		"event_id": {DataType: aws.String("String"), StringValue: aws.String(id)},
	}}
}

// TestFetch (fauxqs): offloaded bodies are replaced by their payloads, under either attribute
// name, the size attribute removed and Offloaded set; an ordinary message is left as it is.
func TestFetch(t *testing.T) {
	t.Parallel()
	k := setup(t)
	r := k.newR(s3payload.ReaderConfig{})
	p1, p2 := bytes.Repeat([]byte("a"), 300<<10), []byte(`{"id":"evt_2"}`)
	plain := &worker.Message{Body: []byte(`{"id":"evt_3"}`)}
	ms := []*worker.Message{k.message(t, "evt_1", p1, worker.PayloadSizeAttribute), plain, k.message(t, "evt_2", p2, worker.LegacyPayloadSizeAttribute)}
	release, errs := r.Fetch(t.Context(), ms)
	defer release()
	for i, err := range errs {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	for i, want := range [][]byte{p1, []byte(`{"id":"evt_3"}`), p2} {
		if !bytes.Equal(ms[i].Body, want) {
			t.Errorf("message %d: body of %d bytes, want %d", i, len(ms[i].Body), len(want))
		}
		if _, ok := ms[i].OffloadedSize(); ok {
			t.Errorf("message %d still carries a size attribute", i)
		}
	}
	if !strings.HasPrefix(ms[0].Offloaded, "s3://"+k.bucket+"/sqsinbox/evt_1/") || plain.Offloaded != "" {
		t.Errorf("Offloaded = %q and %q; want s3://%s/sqsinbox/evt_1/... and empty", ms[0].Offloaded, plain.Offloaded, k.bucket)
	}
	if v, _ := ms[0].Attribute("event_id"); v != "evt_1" {
		t.Errorf("event_id = %q; the other attributes must stay", v)
	}
}

// TestFetchHoldsWithinMaxHeld (fauxqs): payloads count against MaxHeld from their fetch until
// release. With 1 MiB held by one call, another that needs 700 KiB waits (and gives up when its
// context ends, with an error that says why); after the release it fetches. A call whose own
// total is over MaxHeld takes all of it and runs alone.
func TestFetchHoldsWithinMaxHeld(t *testing.T) {
	t.Parallel()
	k := setup(t)
	r := k.newR(s3payload.ReaderConfig{MaxPayload: 1 << 20, MaxHeld: 1 << 20})
	big := bytes.Repeat([]byte("b"), 700<<10)
	releaseA, errs := r.Fetch(t.Context(), []*worker.Message{k.message(t, "evt_a", big, worker.PayloadSizeAttribute)})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, errs = r.Fetch(ctx, []*worker.Message{k.message(t, "evt_b", big, worker.PayloadSizeAttribute)})
	if !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "waiting for room among the payloads held (ReaderConfig.MaxHeld 1048576)") {
		t.Errorf("a fetch past MaxHeld returned %v; want it to wait, then fail with its context", errs[0])
	}
	done := make(chan []error)
	go func() {
		release, errs := r.Fetch(t.Context(), []*worker.Message{k.message(t, "evt_b", big, worker.PayloadSizeAttribute)})
		release()
		done <- errs
	}()
	releaseA()
	releaseA() // a second call does nothing
	select {
	case errs := <-done:
		if errs[0] != nil {
			t.Errorf("after the release: %v", errs[0])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch still waits 30 s after the release")
	}
	two := []*worker.Message{k.message(t, "evt_c", big, worker.PayloadSizeAttribute), k.message(t, "evt_d", big, worker.PayloadSizeAttribute)}
	release, errs := r.Fetch(t.Context(), two)
	release()
	if errs[0] != nil || errs[1] != nil || len(two[1].Body) != len(big) {
		t.Errorf("a call of 1.4 MiB with MaxHeld 1 MiB: %v", errs)
	}
}

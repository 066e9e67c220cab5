package s3payload_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/s3payload"
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

// ref puts payload and returns what the message that points to it carries.
func (k *kit) ref(t *testing.T, id string, payload []byte) s3payload.Ref {
	t.Helper()
	o, err := k.w.Put(t.Context(), id, payload)
	if err != nil {
		t.Fatal(err)
	}
	return s3payload.Ref{Body: []byte(o.Body), Size: o.Size}
}

// TestFetch (fauxqs): each ref's payload is fetched, with the object it came from; a body that
// is no pointer and a bucket not allowed are errors of their own ref only.
func TestFetch(t *testing.T) {
	t.Parallel()
	k := setup(t)
	r := k.newR(s3payload.ReaderConfig{})
	p1, p2 := bytes.Repeat([]byte("a"), 300<<10), []byte(`{"id":"evt_2"}`)
	other := s3payload.Pointer{Bucket: "not-" + k.bucket, Key: "k"}
	refs := []s3payload.Ref{k.ref(t, "evt_1", p1), {Body: []byte(`{"id":"evt_3"}`), Size: "14"}, k.ref(t, "evt_2", p2), {Body: []byte(other.Body()), Size: "1"}}
	payloads, release := r.Fetch(t.Context(), refs)
	defer release()
	if len(payloads) != len(refs) {
		t.Fatalf("%d payloads for %d refs", len(payloads), len(refs))
	}
	for i, want := range map[int][]byte{0: p1, 2: p2} {
		if payloads[i].Err != nil || !bytes.Equal(payloads[i].Data, want) {
			t.Errorf("ref %d: %d bytes, %v; want %d bytes", i, len(payloads[i].Data), payloads[i].Err, len(want))
		}
	}
	if !strings.HasPrefix(payloads[0].From, "s3://"+k.bucket+"/sqsinbox/evt_1/") {
		t.Errorf("From = %q; want s3://%s/sqsinbox/evt_1/...", payloads[0].From, k.bucket)
	}
	if !errors.Is(payloads[1].Err, s3payload.ErrMalformedPointer) || payloads[1].Data != nil {
		t.Errorf("a body that is no pointer: %v; want ErrMalformedPointer", payloads[1].Err)
	}
	if !errors.Is(payloads[3].Err, s3payload.ErrBucketNotAllowed) || payloads[3].From != other.String() {
		t.Errorf("a bucket not allowed: %v from %q; want ErrBucketNotAllowed from %s", payloads[3].Err, payloads[3].From, other)
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
	got, releaseA := r.Fetch(t.Context(), []s3payload.Ref{k.ref(t, "evt_a", big)})
	if got[0].Err != nil {
		t.Fatal(got[0].Err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	refB := k.ref(t, "evt_b", big)
	got, _ = r.Fetch(ctx, []s3payload.Ref{refB})
	if err := got[0].Err; !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for room among the payloads held (ReaderConfig.MaxHeld 1048576)") {
		t.Errorf("a fetch past MaxHeld returned %v; want it to wait, then fail with its context", err)
	}
	done := make(chan error)
	go func() {
		got, release := r.Fetch(t.Context(), []s3payload.Ref{refB})
		release()
		done <- got[0].Err
	}()
	releaseA()
	releaseA() // a second call does nothing
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after the release: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch still waits 30 s after the release")
	}
	two, release := r.Fetch(t.Context(), []s3payload.Ref{k.ref(t, "evt_c", big), k.ref(t, "evt_d", big)})
	release()
	if two[0].Err != nil || two[1].Err != nil || len(two[1].Data) != len(big) {
		t.Errorf("a call of 1.4 MiB with MaxHeld 1 MiB: %v, %v", two[0].Err, two[1].Err)
	}
}

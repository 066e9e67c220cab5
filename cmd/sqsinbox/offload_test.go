package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/s3payload"
	"github.com/sqsinbox/sqsinbox/worker"
)

// TestSendOffloads (fauxqs's SQS and S3; GoAws lacks S3): with --offload-bucket, a line over
// the queue's limit goes to S3 and the queue gets a pointer with ExtendedPayloadSize and the
// line's event_id, which the worker's reader resolves to the line; a line that fits is sent
// inline, or offloaded too with --offload-always. A line over --offload-max-bytes, and
// --offload-always without a bucket, are refused before anything is sent.
func TestSendOffloads(t *testing.T) {
	t.Parallel()
	srv.Need(t, sqstest.S3)
	c, err := srv.S3Client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := srv.CreateBucket(t.Context(), c, "cli")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s3payload.NewReader(s3payload.ReaderConfig{S3: c, Buckets: []string{bucket}})
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-offload"})
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 400*1024) + `"}`
	small := `{"id":"evt_small"}`
	for _, tc := range []struct {
		in   string
		args []string
		want string
	}{
		{big, []string{"--offload-bucket", bucket, "--offload-max-bytes", "300000"}, "stdin line 1: 409625 bytes, over the 300000-byte line limit (--offload-max-bytes)"},
		{small, []string{"--offload-always"}, "--offload-always needs --offload-bucket"},
		{small, []string{"--offload-bucket", "Not_A_Bucket"}, `--offload-bucket: s3payload: WriterConfig.Bucket: bucket name "Not_A_Bucket"`},
	} {
		res := cli(t, tc.in, append([]string{"send", "--queue", q.URL}, tc.args...)...)
		if line := lastLine(res.stderr); res.code == 0 || !strings.Contains(line, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, res.code, line, tc.want)
		}
	}
	cli(t, small+"\n"+big+"\n", "send", "--queue", q.URL, "--offload-bucket", bucket).mustOK(t)
	cli(t, `{"id":"evt_always"}`, "send", "--queue", q.URL, "--offload-bucket", bucket, "--offload-always").mustOK(t)
	want := map[string][2]string{"evt_small": {small, ""}, "evt_big": {big, "offloaded"}, "evt_always": {`{"id":"evt_always"}`, "offloaded"}}
	for _, m := range receiveAll(t, q.URL, 3) {
		wm := &worker.Message{Body: []byte(aws.ToString(m.Body)), Attributes: m.MessageAttributes}
		id, _ := wm.Attribute("event_id")
		size, offloaded := wm.OffloadedSize()
		body, err := wm.Body, error(nil)
		if offloaded {
			got, release := r.Fetch(t.Context(), []s3payload.Ref{{Body: wm.Body, Size: size}})
			release()
			body, err = got[0].Data, got[0].Err
		}
		w, ok := want[id]
		if !ok || err != nil || string(body) != w[0] || offloaded != (w[1] != "") {
			t.Errorf("event %q: %v, a body of %d bytes, offloaded %v; want %d bytes, %s", id, err, len(body), offloaded, len(w[0]), w[1])
		}
		delete(want, id)
	}
	if len(want) > 0 {
		t.Errorf("not received: %v", want)
	}
}

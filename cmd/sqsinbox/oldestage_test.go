package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go/encoding/cbor"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// cloudWatch stands in for CloudWatch's GetMetricData at the wire level, because no CloudWatch
// server is available here: the machine has no network, and GoAws (the SQS server the tests
// use) has no CloudWatch. It speaks what aws-sdk-go-v2's CloudWatch client (v1.75) sends:
// Smithy RPC v2 CBOR, a POST to /service/GraniteServiceVersion20100801/operation/GetMetricData
// with a CBOR body, answered in CBOR. It checks that every query asks for AWS/SQS
// ApproximateAgeOfOldestMessage by QueueName, Maximum per 60 s, over 15 minutes, and answers
// with what the test scripted for that queue name; so tests with their own queues share it and
// run in parallel. A query that is not what stats should ask is answered 400 with the reason,
// which stats prints.
type cloudWatch struct {
	*httptest.Server
	stop chan struct{} // closed at Close: a hanging answer returns

	mu      sync.Mutex
	answers map[string]cwAnswer
	calls   map[string]int // GetMetricData calls naming the queue
}

// cwAnswer is what the stand-in answers for one queue name. The zero value is an answer with no
// datapoints, as CloudWatch gives for a queue that has published none.
type cwAnswer struct {
	ages   []float64   // seconds, one per timestamp in at
	at     []time.Time // in any order: stats must pick the newest
	status int         // when non-zero, answer the whole call with this HTTP status and no body (200: a JSON body)
	hang   bool        // when set, answer nothing until the client gives up
}

func startCloudWatch() *cloudWatch {
	cw := &cloudWatch{stop: make(chan struct{}), answers: map[string]cwAnswer{}, calls: map[string]int{}}
	cw.Server = httptest.NewServer(http.HandlerFunc(cw.serve))
	return cw
}

func (cw *cloudWatch) Close() {
	close(cw.stop)
	cw.Server.Close()
}

// answer scripts the answer for a queue name; tests use their own queues.
func (cw *cloudWatch) answer(queue string, a cwAnswer) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.answers[queue] = a
}

// callsFor is the number of GetMetricData calls that asked about queue.
func (cw *cloudWatch) callsFor(queue string) int {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.calls[queue]
}

func (cw *cloudWatch) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	queries, bad := parseGetMetricData(r, body)
	if bad != "" {
		writeCBOR(w, http.StatusBadRequest, cbor.Map{"__type": cbor.String("InvalidParameterValue"), "message": cbor.String(bad)})
		return
	}
	cw.mu.Lock()
	var results cbor.List
	status, hang := 0, false
	for id, queue := range queries {
		cw.calls[queue]++
		a := cw.answers[queue]
		status, hang = max(status, a.status), hang || a.hang
		ts, vs := cbor.List{}, cbor.List{}
		for i, at := range a.at {
			ts = append(ts, &cbor.Tag{ID: 1, Value: cbor.Float64(float64(at.UnixMilli()) / 1e3)})
			vs = append(vs, cbor.Float64(a.ages[i]))
		}
		results = append(results, cbor.Map{"Id": cbor.String(id), "Label": cbor.String("ApproximateAgeOfOldestMessage"),
			"StatusCode": cbor.String("Complete"), "Timestamps": ts, "Values": vs})
	}
	cw.mu.Unlock()
	switch {
	case hang:
		select {
		case <-r.Context().Done():
		case <-cw.stop:
		case <-time.After(time.Minute):
		}
	case status == http.StatusOK:
		// What a server that is not CloudWatch may answer: JSON, not CBOR.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"message":"unknown operation"}`))
	case status != 0:
		w.WriteHeader(status)
	default:
		writeCBOR(w, http.StatusOK, cbor.Map{"MetricDataResults": results})
	}
}

func writeCBOR(w http.ResponseWriter, status int, v cbor.Value) {
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	w.WriteHeader(status)
	_, _ = w.Write(cbor.Encode(v))
}

// parseGetMetricData checks that the request is the GetMetricData stats should send and returns
// its queries' queue names by query Id, or what is wrong with it.
func parseGetMetricData(r *http.Request, body []byte) (map[string]string, string) {
	if r.Method != http.MethodPost || r.URL.Path != "/service/GraniteServiceVersion20100801/operation/GetMetricData" ||
		r.Header.Get("Smithy-Protocol") != "rpc-v2-cbor" {
		return nil, fmt.Sprintf("stand-in: want an rpc-v2-cbor GetMetricData, got %s %s (Smithy-Protocol %q)", r.Method, r.URL.Path, r.Header.Get("Smithy-Protocol"))
	}
	v, err := cbor.Decode(body)
	if err != nil {
		return nil, "stand-in: body is not CBOR: " + err.Error()
	}
	in, _ := v.(cbor.Map)
	start, err1 := cbor.AsTime(in["StartTime"])
	end, err2 := cbor.AsTime(in["EndTime"])
	if err1 != nil || err2 != nil || end.Sub(start) != 15*time.Minute || time.Until(end) > 2*time.Minute || time.Since(end) > time.Minute {
		return nil, fmt.Sprintf("stand-in: want the last 15 minutes, got %v to %v", start, end)
	}
	list, _ := in["MetricDataQueries"].(cbor.List)
	if len(list) == 0 {
		return nil, "stand-in: no MetricDataQueries"
	}
	queries := map[string]string{}
	for _, q := range list {
		q, _ := q.(cbor.Map)
		id, _ := q["Id"].(cbor.String)
		stat, _ := q["MetricStat"].(cbor.Map)
		m, _ := stat["Metric"].(cbor.Map)
		dims, _ := m["Dimensions"].(cbor.List)
		var dim cbor.Map
		if len(dims) == 1 {
			dim, _ = dims[0].(cbor.Map)
		}
		period, _ := stat["Period"].(cbor.Uint)
		if id == "" || m["Namespace"] != cbor.String("AWS/SQS") || m["MetricName"] != cbor.String("ApproximateAgeOfOldestMessage") ||
			dim["Name"] != cbor.String("QueueName") || stat["Stat"] != cbor.String("Maximum") || period != 60 {
			return nil, fmt.Sprintf("stand-in: want AWS/SQS ApproximateAgeOfOldestMessage by QueueName, Maximum per 60 s; got %v", q)
		}
		name, _ := dim["Value"].(cbor.String)
		queries[string(id)] = string(name)
	}
	return queries, ""
}

// statsRow is the stats line of the named queue.
func statsRow(t *testing.T, stdout, name string) string {
	t.Helper()
	for l := range strings.Lines(stdout) {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return l
		}
	}
	t.Fatalf("no row for %s in:\n%s", name, stdout)
	return ""
}

func TestStatsShowsTheOldestAgeFromCloudWatch(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-age", MaxReceiveCount: 3})
	dlq := lastPart(q.DLQURL)
	newest := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	cw.answer(q.Name, cwAnswer{
		ages: []float64{60, 125.4, 30},
		at:   []time.Time{newest.Add(-time.Minute), newest, newest.Add(-2 * time.Minute)},
	})
	r := cli(t, "", "stats", "--no-db", "--queue", q.Name).mustOK(t)
	if !strings.Contains(r.stdout, "OLDEST AGE") {
		t.Fatalf("no OLDEST AGE column:\n%s", r.stdout)
	}
	if row, want := statsRow(t, r.stdout, q.Name), "2m5s as of "+newest.Format(time.RFC3339); !strings.Contains(row, want) {
		t.Fatalf("queue row %q; want %q\nstderr: %s", row, want, r.stderr)
	}
	if row, want := statsRow(t, r.stdout, dlq), "no datapoint in the last 15 min"; !strings.Contains(row, want) {
		t.Fatalf("DLQ row %q; want %q", row, want)
	}
	if r.stderr != "" {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if n := cw.callsFor(q.Name); n != 1 {
		t.Fatalf("GetMetricData calls for the queue = %d, want 1 (the queue and its DLQ in one call)", n)
	}
}

func TestStatsWithoutCloudWatchStillShowsTheQueue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer cwAnswer
		want   string
	}{
		{"server error", cwAnswer{status: http.StatusInternalServerError}, "CloudWatch answered HTTP 500"},
		{"throttled", cwAnswer{status: http.StatusTooManyRequests}, "CloudWatch answered HTTP 429"},
		{"not CloudWatch", cwAnswer{status: http.StatusOK}, "the CloudWatch endpoint answered HTTP 200 with something that is not a CloudWatch answer (a local SQS server without CloudWatch?); --no-age skips the age"},
		{"no answer", cwAnswer{hang: true}, "CloudWatch did not answer within 5s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-noage"})
			cw.answer(q.Name, tc.answer)
			start := time.Now()
			r := cli(t, "", "stats", "--no-db", "--queue", q.Name).mustOK(t)
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("stats took %v; CloudWatch must be bounded by %v", took, ageTimeout)
			}
			assertAgeUnavailable(t, r, q.Name, tc.want)
		})
	}
}

// assertAgeUnavailable checks that stats printed the queue's row with the age unavailable, and
// one line on stderr saying why.
func assertAgeUnavailable(t *testing.T, r result, queue, why string) {
	t.Helper()
	if row := statsRow(t, r.stdout, queue); !strings.HasSuffix(strings.TrimSpace(row), "unavailable") {
		t.Fatalf("queue row %q; want the age unavailable", row)
	}
	want := "sqsinbox stats: oldest age unavailable: " + why
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Fatalf("stderr %q; want one line starting %q", r.stderr, want)
	}
}

// TestStatsWithCloudWatchUnreachable points CloudWatch at a closed port, so it changes the
// environment and cannot run in parallel.
func TestStatsWithCloudWatchUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	t.Setenv("AWS_ENDPOINT_URL_CLOUDWATCH", closed)
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-closed"})
	r := cli(t, "", "stats", "--no-db", "--queue", q.Name).mustOK(t)
	assertAgeUnavailable(t, r, q.Name, "cannot reach CloudWatch: ")
	if !strings.Contains(r.stderr, "connection refused") {
		t.Fatalf("stderr %q does not say the connection was refused", r.stderr)
	}
}

func TestStatsNoAgeAsksNoCloudWatch(t *testing.T) {
	t.Parallel()
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-noask", MaxReceiveCount: 3})
	// Were it asked, the stand-in would fail, and stats would say so.
	cw.answer(q.Name, cwAnswer{status: http.StatusInternalServerError})
	r := cli(t, "", "stats", "--no-db", "--no-age", "--queue", q.Name).mustOK(t)
	statsRow(t, r.stdout, q.Name)
	if strings.Contains(r.stdout, "OLDEST AGE") || strings.Contains(r.stdout, "unavailable") || r.stderr != "" {
		t.Fatalf("--no-age still shows an age:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	if n := cw.callsFor(q.Name) + cw.callsFor(lastPart(q.DLQURL)); n != 0 {
		t.Fatalf("--no-age made %d GetMetricData calls, want 0", n)
	}
}

package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// sqsFault is a wire-level SQS stand-in (the JSON protocol) for faults GoAws cannot produce: a
// dead-letter queue the caller may not read (GoAws refuses a redrive policy naming a queue it
// does not have, and deleting a queue under load crashes it). It answers GetQueueUrl and
// GetQueueAttributes from a table and refuses the names in denied with AccessDenied.
type sqsFault struct {
	*httptest.Server
	queues map[string]map[string]string // name -> attributes
	denied map[string]bool
}

func startSQSFault(t *testing.T, queues map[string]map[string]string, denied ...string) *sqsFault {
	t.Helper()
	f := &sqsFault{queues: queues, denied: map[string]bool{}}
	for _, d := range denied {
		f.denied[d] = true
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *sqsFault) serve(w http.ResponseWriter, r *http.Request) {
	var in struct{ QueueName, QueueUrl string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		f.fail(w, http.StatusBadRequest, "InvalidParameterValue", err.Error())
		return
	}
	name := in.QueueName
	if name == "" {
		name = lastPart(in.QueueUrl)
	}
	attrs, ok := f.queues[name]
	switch {
	case f.denied[name]:
		f.fail(w, http.StatusForbidden, "AccessDenied", "User is not authorized to perform: sqs:"+
			strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")+" on resource "+name)
	case !ok:
		f.fail(w, http.StatusBadRequest, "QueueDoesNotExist", "The specified queue does not exist.")
	case r.Header.Get("X-Amz-Target") == "AmazonSQS.GetQueueUrl":
		f.reply(w, http.StatusOK, map[string]any{"QueueUrl": f.URL + "/000000000000/" + name})
	case r.Header.Get("X-Amz-Target") == "AmazonSQS.GetQueueAttributes":
		f.reply(w, http.StatusOK, map[string]any{"Attributes": attrs})
	default:
		f.fail(w, http.StatusBadRequest, "InvalidAction", "not in this stand-in")
	}
}

func (f *sqsFault) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Amzn-Query-Error", code+";Sender")
	f.reply(w, status, map[string]any{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

func (f *sqsFault) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// hangingServer accepts connections and never answers, like a server that is up but stuck. It
// returns the address; the connections are closed when the test ends.
func hangingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

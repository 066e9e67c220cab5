package main

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSameAsLocalstackScripts keeps the table of resources.go and the LocalStack init scripts
// (localstack/init/ready.d) the same: it reads the scripts' queue list, attribute values, topic
// and subscribers, and compares them with the table. The visibility timeout differs on purpose
// (resources.go says why): the scripts' must be the Terraform module's 30 s. No server is needed.
func TestSameAsLocalstackScripts(t *testing.T) {
	t.Parallel()
	queues := readScript(t, "10-create-queues.sh")
	topic := readScript(t, "20-create-topic.sh")

	if got := array(t, queues, "queues"); !slices.Equal(got, queueNames) {
		t.Errorf("10-create-queues.sh creates queues %q, resources.go %q", got, queueNames)
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"retention_seconds", seconds(retention)},
		{"visibility_timeout_seconds", 30},
		{"receive_wait_seconds", seconds(receiveWait)},
		{"max_receive_count", maxReceiveCount},
		{"dlq_retention_seconds", seconds(dlqRetention)},
	} {
		if got := scalar(t, queues, c.name); got != strconv.Itoa(c.want) {
			t.Errorf("10-create-queues.sh has %s=%s, resources.go %d", c.name, got, c.want)
		}
	}
	for _, want := range []string{`--queue-name "$name` + dlqSuffix + `"`, `\"RedriveAllowPolicy\"`, `redrivePermission\\\":\\\"byQueue`} {
		if !strings.Contains(queues, want) {
			t.Errorf("10-create-queues.sh no longer has %s, which resources.go does the same as", want)
		}
	}

	if got := scalar(t, topic, "topic"); got != topicName {
		t.Errorf("20-create-topic.sh creates topic %s, resources.go %s", got, topicName)
	}
	var want []string
	for _, s := range subscriptions {
		want = append(want, s.queue+"="+strconv.FormatBool(s.raw))
	}
	if got := array(t, topic, "subscribers"); !slices.Equal(got, want) {
		t.Errorf("20-create-topic.sh subscribes %q (queue=raw delivery), resources.go %q", got, want)
	}
	for _, want := range []string{`aws:SourceArn`, `TopicSendsToQueue`} {
		if !strings.Contains(topic, want) {
			t.Errorf("20-create-topic.sh's queue policy no longer has %s, which sqstest.TopicQueuePolicy has", want)
		}
	}
}

func readScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../../localstack/init/ready.d/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// scalar returns the value of the script's assignment `[readonly ]name=value`.
func scalar(t *testing.T, script, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*(?:readonly\s+)?` + regexp.QuoteMeta(name) + `=(\S+)\s*$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the script has no assignment %s=...", name)
	}
	return m[1]
}

// array returns the words of the script's array assignment `name=(a b c)`.
func array(t *testing.T, script, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `=\(([^)]*)\)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the script has no array %s=(...)", name)
	}
	return strings.Fields(m[1])
}

func seconds(d time.Duration) int { return int(d / time.Second) }

package worker

import (
	"testing"
	"time"
)

func TestParseRedrivePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		arn  string
		max  int
		fail bool
	}{
		{`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":5}`, "arn:aws:sqs:us-east-1:1:dlq", 5, false},
		{`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":"3"}`, "arn:aws:sqs:us-east-1:1:dlq", 3, false}, // GoAws
		{`{"deadLetterTargetArn":"a"}`, "a", 0, false},
		{`{"maxReceiveCount":"x"}`, "", 0, true},
		{`not json`, "", 0, true},
	} {
		arn, n, err := parseRedrivePolicy(tc.in)
		if (err != nil) != tc.fail || arn != tc.arn || n != tc.max {
			t.Errorf("parseRedrivePolicy(%s) = %q, %d, %v", tc.in, arn, n, err)
		}
	}
}

func FuzzParseRedrivePolicy(f *testing.F) {
	f.Add(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":5}`)
	f.Add(`{"maxReceiveCount":"3"}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, s string) {
		_, n, err := parseRedrivePolicy(s)
		if err == nil && n < 0 && s == "" {
			t.Fatal("unreachable")
		}
	})
}

func TestVisibilitySeconds(t *testing.T) {
	t.Parallel()
	now := time.Now()
	fresh := &Message{Received: now}
	// First received 13 hours ago, received again now: the cap counts from this receive.
	redelivered := &Message{FirstReceived: now.Add(-13 * time.Hour), Received: now}
	old := &Message{Received: now.Add(-MaxVisibility + time.Minute)}
	for _, tc := range []struct {
		name string
		m    *Message
		d    time.Duration
		want int32
	}{
		{"zero", fresh, 0, 0},
		{"negative", fresh, -time.Second, 0},
		{"rounded up", fresh, 1500 * time.Millisecond, 2},
		{"capped", fresh, 13 * time.Hour, int32((MaxVisibility - capMargin) / time.Second)},
		{"first receive long ago", redelivered, time.Hour, 3600},
		{"this receive near the cap", old, time.Hour, int32((time.Minute - capMargin) / time.Second)},
		{"this receive at the cap", &Message{Received: now.Add(-MaxVisibility)}, time.Hour, 0},
	} {
		if got := visibilitySeconds(tc.m, tc.d, now); got != tc.want {
			t.Errorf("%s: visibilitySeconds(received %v ago, %v) = %d, want %d", tc.name, now.Sub(tc.m.Received), tc.d, got, tc.want)
		}
	}
}

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
	fresh := &Message{FirstReceived: now}
	old := &Message{FirstReceived: now.Add(-MaxVisibility + time.Minute)}
	for _, tc := range []struct {
		m    *Message
		d    time.Duration
		want int32
	}{
		{fresh, 0, 0},
		{fresh, -time.Second, 0},
		{fresh, 1500 * time.Millisecond, 2},
		{fresh, 13 * time.Hour, int32((MaxVisibility - capMargin) / time.Second)},
		{old, time.Hour, int32((time.Minute - capMargin) / time.Second)},
		{&Message{FirstReceived: now.Add(-MaxVisibility)}, time.Hour, 0},
	} {
		if got := visibilitySeconds(tc.m, tc.d, now); got != tc.want {
			t.Errorf("visibilitySeconds(first %v ago, %v) = %d, want %d", now.Sub(tc.m.FirstReceived), tc.d, got, tc.want)
		}
	}
}

package inboxhandler_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
)

func msg(body string, attrs map[string]string) *worker.Message {
	m := &worker.Message{ID: "sqs-id-1", Body: []byte(body)}
	if attrs != nil {
		m.Attributes = map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			m.Attributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	return m
}

func TestDefaultKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		m     *worker.Message
		key   string
		isErr error
	}{
		{"attribute wins", msg(`{"id":"body"}`, map[string]string{"event_id": "attr"}), "attr", nil},
		{"body id", msg(`{"id":"evt_9f3k"}`, nil), "evt_9f3k", nil},
		{"numeric id", msg(`{"id":42}`, nil), "42", nil},
		{"no key", msg(`{"other":1}`, nil), "", inbox.ErrKeyMissing},
		{"not json", msg(`hello`, nil), "", inbox.ErrBodyNotObject},
		{"empty attribute is invalid, not skipped", msg(`{"id":"body"}`, map[string]string{"event_id": ""}), "", inbox.ErrKeyEmpty},
		{"too long", msg(`{"id":"`+strings.Repeat("x", 513)+`"}`, nil), "", inbox.ErrKeyTooLong},
		{"NUL", msg(`{"id":"a\u0000b"}`, nil), "", inbox.ErrKeyNUL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := inboxhandler.DefaultKey(tc.m)
			if tc.isErr != nil {
				var ke *inbox.KeyError
				if !errors.Is(err, tc.isErr) || !errors.As(err, &ke) {
					t.Fatalf("DefaultKey = %q, %v; want a *inbox.KeyError wrapping %v", k, err, tc.isErr)
				}
				return
			}
			if err != nil || k != tc.key {
				t.Fatalf("DefaultKey = %q, %v; want %q", k, err, tc.key)
			}
		})
	}
}

func TestOtherKeys(t *testing.T) {
	t.Parallel()
	m := msg(`{"a":1}`, nil)
	if k, err := inboxhandler.KeyFromMessageID(m); err != nil || k != "sqs-id-1" {
		t.Errorf("KeyFromMessageID = %q, %v", k, err)
	}
	if k, _ := inboxhandler.KeyFromBody(m); k != inbox.KeyFromBody([]byte(`{"a":1}`)) {
		t.Errorf("KeyFromBody = %q", k)
	}
	fallback := inboxhandler.FirstKey(inboxhandler.DefaultKey, inboxhandler.KeyFromMessageID)
	if k, err := fallback(msg(`{"b":1}`, nil)); err != nil || k != "sqs-id-1" {
		t.Errorf("FirstKey fallback = %q, %v", k, err)
	}
}

func FuzzDefaultKey(f *testing.F) {
	for _, s := range []string{`{"id":"evt"}`, `{"id":42}`, `{}`, `x`, `{"id":"a\u0000"}`, `{"id":null}`, `[]`} {
		f.Add(s, "attr")
	}
	f.Fuzz(func(t *testing.T, body, attr string) {
		k, err := inboxhandler.DefaultKey(msg(body, map[string]string{"event_id": attr}))
		if err == nil {
			if verr := inbox.ValidateKey(k); verr != nil {
				t.Fatalf("DefaultKey returned invalid key %q: %v", k, verr)
			}
			return
		}
		var ke *inbox.KeyError
		if !errors.As(err, &ke) {
			t.Fatalf("error %v is not a *inbox.KeyError", err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := inboxhandler.New(nil, "h", nil, nil); err == nil {
		t.Error("nil inbox accepted")
	}
	b := setup(t, nil)
	if _, err := inboxhandler.New(b.ib, "", nil, b.effect); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := inboxhandler.New(b.ib, "h", nil, nil); err == nil {
		t.Error("nil fn accepted")
	}
}

func TestKeyFromSNSMessageID(t *testing.T) {
	t.Parallel()
	m := msg(`{"id":"evt_1"}`, nil)
	if _, err := inboxhandler.KeyFromSNSMessageID(m); !errors.Is(err, inbox.ErrKeyMissing) {
		t.Errorf("no SNS envelope: %v, want ErrKeyMissing", err)
	}
	m.SNS = &worker.SNSNotification{MessageID: "5b2c7e1e-0000-4000-8000-000000000001"}
	if k, err := inboxhandler.KeyFromSNSMessageID(m); err != nil || k != m.SNS.MessageID {
		t.Errorf("KeyFromSNSMessageID = %q, %v", k, err)
	}
	// The default key does not use it: the body's id wins.
	if k, err := inboxhandler.DefaultKey(m); err != nil || k != "evt_1" {
		t.Errorf("DefaultKey = %q, %v; want the body's id", k, err)
	}
}

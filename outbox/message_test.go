package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/outbox"
)

const (
	queueURL  = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
	fifoURL   = "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo"
	topicARN  = "arn:aws:sns:us-east-1:123456789012:order-paid"
	fifoTopic = "arn:aws:sns:us-east-1:123456789012:order-paid.fifo"
)

func attrs(n int) map[string]outbox.Attribute {
	m := map[string]outbox.Attribute{}
	for i := range n {
		m["a"+strings.Repeat("x", i)] = outbox.StringAttribute("v")
	}
	return m
}

// addCases are messages Add must refuse, each with the field its error must name.
var addCases = []struct {
	name  string
	msg   outbox.Message
	field string
}{
	{"no destination", outbox.Message{Body: "b"}, "Destination"},
	{"not a URL or ARN", outbox.Message{Destination: "orders", Body: "b"}, "Destination"},
	{"ARN of another service", outbox.Message{Destination: "arn:aws:sqs:us-east-1:1:orders", Body: "b"}, "Destination"},
	{"URL without account", outbox.Message{Destination: "https://sqs.us-east-1.amazonaws.com/orders", Body: "b"}, "Destination"},
	{"empty body", outbox.Message{Destination: queueURL}, "Body"},
	{"body with NUL", outbox.Message{Destination: queueURL, Body: "a\x00b"}, "Body"},
	{"body not UTF-8", outbox.Message{Destination: queueURL, Body: "\xff"}, "Body"},
	{"body over 256 KiB", outbox.Message{Destination: queueURL, Body: strings.Repeat("x", 256*1024)}, "Body"},
	{"SNS body over 256 KiB", outbox.Message{Destination: topicARN, Body: strings.Repeat("x", 256*1024)}, "Body"},
	{"ten attributes of its own", outbox.Message{Destination: queueURL, Body: "b", Attributes: attrs(10)}, "Attributes"},
	{"event_id attribute", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"event_id": outbox.StringAttribute("x")}}, `Attributes["event_id"]`},
	{"AWS. prefix", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"aws.trace": outbox.StringAttribute("x")}}, `Attributes["aws.trace"]`},
	{"Amazon. prefix", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"Amazon.x": outbox.StringAttribute("x")}}, `Attributes["Amazon.x"]`},
	{"space in name", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"a b": outbox.StringAttribute("x")}}, `Attributes["a b"]`},
	{"two periods", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"a..b": outbox.StringAttribute("x")}}, `Attributes["a..b"]`},
	{"trailing period", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"a.": outbox.StringAttribute("x")}}, `Attributes["a."]`},
	{"empty string value", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"a": outbox.StringAttribute("")}}, `Attributes["a"]`},
	{"bad number", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"n": outbox.NumberAttribute("12abc")}}, `Attributes["n"]`},
	{"number of 39 digits", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"n": outbox.NumberAttribute(strings.Repeat("9", 39))}}, `Attributes["n"]`},
	{"empty binary", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"b": outbox.BinaryAttribute(nil)}}, `Attributes["b"]`},
	{"unknown data type", outbox.Message{Destination: queueURL, Body: "b", Attributes: map[string]outbox.Attribute{"t": {DataType: "Blob", StringValue: "x"}}}, `Attributes["t"]`},
	{"FIFO queue without group", outbox.Message{Destination: fifoURL, Body: "b"}, "GroupID"},
	{"FIFO topic without group", outbox.Message{Destination: fifoTopic, Body: "b"}, "GroupID"},
	{"delay on a FIFO queue", outbox.Message{Destination: fifoURL, Body: "b", GroupID: "g", Delay: time.Second}, "Delay"},
	{"delay on a topic", outbox.Message{Destination: topicARN, Body: "b", Delay: time.Second}, "Delay"},
	{"delay over 15 minutes", outbox.Message{Destination: queueURL, Body: "b", Delay: 16 * time.Minute}, "Delay"},
	{"delay not whole seconds", outbox.Message{Destination: queueURL, Body: "b", Delay: 1500 * time.Millisecond}, "Delay"},
	{"dedup id on a standard queue", outbox.Message{Destination: queueURL, Body: "b", DeduplicationID: "d"}, "DeduplicationID"},
	{"group id with a space", outbox.Message{Destination: fifoURL, Body: "b", GroupID: "a b"}, "GroupID"},
	{"group id on a standard queue over 128 characters", outbox.Message{Destination: queueURL, Body: "b", GroupID: strings.Repeat("g", 129)}, "GroupID"},
	{"group id on a standard topic with a space", outbox.Message{Destination: topicARN, Body: "b", GroupID: "tenant 1"}, "GroupID"},
	{"event id with NUL", outbox.Message{Destination: queueURL, Body: "b", EventID: "e\x00"}, "EventID"},
	{"event id over 512 bytes", outbox.Message{Destination: queueURL, Body: "b", EventID: strings.Repeat("e", 513)}, "EventID"},
}

// TestAddRefuses checks that Add refuses what SQS or SNS would, naming the field, and writes
// nothing: the caller's transaction stays usable.
func TestAddRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	tx := b.tx(t)
	for _, c := range addCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.ob.Add(ctx, tx, c.msg)
			var me *outbox.MessageError
			if !errors.As(err, &me) || !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Add = %v; want a *MessageError", err)
			}
			if me.Field != c.field || !strings.Contains(err.Error(), "Message."+c.field) {
				t.Fatalf("error names field %q (%v); want %q", me.Field, err, c.field)
			}
		})
	}
	if n := countIn(t, tx, b.schema); n != 0 {
		t.Fatalf("%d rows written; want none", n)
	}
}

// TestAddAccepts checks the limits from the accepting side: what is just inside them is
// written, with the event id generated when none is given.
func TestAddAccepts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	big := strings.Repeat("x", 256*1024-len("event_idString")-36)
	ok := []outbox.Message{
		{Destination: queueURL, Body: "b", Attributes: attrs(9)},
		{Destination: queueURL, Body: big},
		{Destination: queueURL, Body: "b", Delay: 15 * time.Minute, GroupID: "fair"},
		{Destination: queueURL, Body: "b", GroupID: "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" + strings.Repeat("a", 96)},
		{Destination: topicARN, Body: "b", GroupID: "tenant-1"},
		{Destination: fifoURL, Body: "b", GroupID: "g"},
		{Destination: fifoTopic, Body: "b", GroupID: "g", DeduplicationID: "d-1"},
		{Destination: topicARN, Body: "b", Attributes: map[string]outbox.Attribute{
			"n": outbox.NumberAttribute("-1.5e10"), "bin": outbox.BinaryAttribute([]byte{0, 1}), "s.x": {DataType: "String.json", StringValue: "{}"},
		}},
		{Destination: "http://sqs.us-east-1.localhost:4566/000000000000/q", Body: "b", EventID: strings.Repeat("é", 256)},
	}
	tx := b.tx(t)
	for i, m := range ok {
		id, err := b.ob.Add(ctx, tx, m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if id == "" || (m.EventID != "" && id != m.EventID) {
			t.Fatalf("message %d: event id %q", i, id)
		}
	}
	if n := countIn(t, tx, b.schema); n != len(ok) {
		t.Fatalf("%d rows; want %d", n, len(ok))
	}
	// The same event to the same destination again is recorded once; the transaction goes on.
	m := outbox.Message{Destination: queueURL, Body: "b", EventID: "evt_9f3k"}
	if _, err := b.ob.Add(ctx, tx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ob.Add(ctx, tx, m); !errors.Is(err, outbox.ErrDuplicateEvent) {
		t.Fatalf("second Add = %v; want ErrDuplicateEvent", err)
	}
	if n := countIn(t, tx, b.schema); n != len(ok)+1 {
		t.Fatalf("%d rows; want %d", n, len(ok)+1)
	}
}

// TestMaxMessageSize (PostgreSQL) checks that the size limit follows Config, up to 1 MiB, for
// queues only.
func TestMaxMessageSize(t *testing.T) {
	t.Parallel()
	b := setup(t, &outbox.Config{MaxMessageSize: outbox.MaxMessageSizeLimit})
	ctx := t.Context()
	tx := b.tx(t)
	body := strings.Repeat("x", 512*1024)
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: queueURL, Body: body}); err != nil {
		t.Fatalf("512 KiB to a queue under a 1 MiB limit: %v", err)
	}
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: topicARN, Body: body}); err == nil {
		t.Fatal("512 KiB to a topic: accepted; SNS takes 256 KiB")
	}
	if _, err := outbox.New(b.pool, &outbox.Config{MaxMessageSize: outbox.MaxMessageSizeLimit + 1}); err == nil || !strings.Contains(err.Error(), "Config.MaxMessageSize") {
		t.Fatalf("New with MaxMessageSize over 1 MiB = %v; want an error naming the field", err)
	}
	if _, err := outbox.New(b.pool, &outbox.Config{MaxOffloadSize: outbox.MaxOffloadSizeLimit + 1}); err == nil || !strings.Contains(err.Error(), "Config.MaxOffloadSize") {
		t.Fatalf("New with MaxOffloadSize over its limit = %v; want an error naming the field", err)
	}
	off := setup(t, &outbox.Config{MaxOffloadSize: 1 << 20})
	attrs := map[string]outbox.Attribute{"pad": outbox.StringAttribute(strings.Repeat("p", 256*1024-900))}
	if _, err := off.ob.Add(ctx, off.tx(t), outbox.Message{Destination: queueURL, Body: body, Attributes: attrs}); err == nil || !strings.Contains(err.Error(), "Message.Attributes: with the attributes") {
		t.Fatalf("a body to offload with attributes that leave no room for the pointer = %v; want refused", err)
	}
	nine := map[string]outbox.Attribute{}
	for i := range 9 {
		nine[fmt.Sprintf("a%d", i)] = outbox.StringAttribute("v")
	}
	if _, err := off.ob.Add(ctx, off.tx(t), outbox.Message{Destination: queueURL, Body: body, Attributes: nine}); err == nil || !strings.Contains(err.Error(), "a message offloaded to S3 takes at most 8") {
		t.Fatalf("a body to offload with 9 attributes = %v; want refused (the relay adds event_id and the size attribute)", err)
	}
	if _, err := outbox.New(b.pool, &outbox.Config{Schema: "Bad-Schema"}); err == nil || !strings.Contains(err.Error(), "Config.Schema") {
		t.Fatalf("New with a bad schema = %v; want an error naming the field", err)
	}
}

// TestMaxMessageSizes (PostgreSQL): a destination's own limit, from Config.MaxMessageSizes,
// overrides MaxMessageSize: a topic raised to 1 MiB takes 512 KiB where the others keep 256 KiB,
// a queue lowered to 2 KiB refuses 3 KiB naming the limit; bad entries are refused at New.
func TestMaxMessageSizes(t *testing.T) {
	t.Parallel()
	bigTopic := topicARN + "-big"
	small := queueURL + "-small"
	b := setup(t, &outbox.Config{MaxMessageSizes: map[string]int{bigTopic: outbox.MaxMessageSizeLimit, small: 2048}})
	ctx := t.Context()
	tx := b.tx(t)
	body := strings.Repeat("x", 512*1024)
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: bigTopic, Body: body}); err != nil {
		t.Errorf("512 KiB to a topic raised to 1 MiB: %v", err)
	}
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: topicARN, Body: body}); err == nil {
		t.Error("512 KiB to a topic not listed: accepted; it keeps 256 KiB")
	}
	if _, err := b.ob.Add(ctx, tx, outbox.Message{Destination: small, Body: strings.Repeat("x", 3000)}); err == nil ||
		!strings.Contains(err.Error(), "the limit for this destination is 2048") {
		t.Errorf("3 KiB to a queue lowered to 2 KiB = %v; want the limit named", err)
	}
	for _, bad := range []map[string]int{{small: outbox.MaxMessageSizeLimit + 1}, {small: 0}, {"not-a-destination": 2048}} {
		if _, err := outbox.New(b.pool, &outbox.Config{MaxMessageSizes: bad}); err == nil || !strings.Contains(err.Error(), "Config.MaxMessageSizes") {
			t.Errorf("New with MaxMessageSizes %v = %v; want an error naming the field", bad, err)
		}
	}
}

// FuzzAttributeName checks that ValidateAttributeName never accepts a name SQS refuses, by the
// rules restated independently here, and never panics.
func FuzzAttributeName(f *testing.F) {
	for _, c := range addCases {
		for k := range c.msg.Attributes {
			f.Add(k)
		}
	}
	for _, s := range []string{"event_id", "a.b", "A-b_c.9", "", ".a", "AWS.x", "aws.", "Amazon", "amazon.x", "é", strings.Repeat("a", 257)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := outbox.ValidateAttributeName(name)
		want := len(name) >= 1 && len(name) <= 256
		for _, r := range name {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", r) {
				want = false
			}
		}
		lower := strings.ToLower(name)
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") ||
			strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
			want = false
		}
		if (err == nil) != want {
			t.Fatalf("ValidateAttributeName(%q) = %v; want ok=%v", name, err, want)
		}
	})
}

func countIn(t *testing.T, tx pgx.Tx, schema string) int {
	t.Helper()
	var n int
	if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".outbox_messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

package outbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits that SQS and SNS set, which [Outbox.Add] checks so that the relay never meets them.
const (
	// MaxAttributes is the number of message attributes SQS and SNS accept per message. The
	// relay adds one, [EventIDAttribute], so a Message may carry MaxAttributes-1 of its own.
	MaxAttributes = 10
	// MaxDelay is the longest per-message delay SQS accepts.
	MaxDelay = 15 * time.Minute
	// MaxSNSMessageSize is the size limit of an SNS message (body and attributes), whatever
	// Config.MaxMessageSize says, unless Config.MaxMessageSizes gives the topic's own: the
	// default of a topic's MaximumMessageSize attribute.
	MaxSNSMessageSize = 256 * 1024
	// MaxEventIDLen is the longest event id, in bytes: the inbox's limit on keys.
	MaxEventIDLen = 512
	// EventIDAttribute is the String message attribute the relay puts on every message: the
	// event id, which the consuming inbox takes as its key.
	EventIDAttribute = "event_id"
)

// Message is an event to publish.
type Message struct {
	// Destination is an SQS queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) or an SNS
	// topic ARN (arn:PARTITION:sns:REGION:ACCOUNT:NAME). A name ending in .fifo is FIFO.
	// Required.
	Destination string
	// Body is the message body: 1 byte or more of valid UTF-8 with only the characters SQS
	// accepts. Required.
	Body string
	// EventID is the event's id, stable across every retry of the producer, sent as the
	// event_id attribute. Empty means a new random id, which Add returns: pass your own when the
	// business operation already has one, so that a retried operation keeps it.
	EventID string
	// Attributes are message attributes, at most MaxAttributes-1 (the relay adds event_id).
	Attributes map[string]Attribute
	// GroupID is the MessageGroupId: 1 to 128 characters of A-Z a-z 0-9 and ASCII punctuation.
	// Required for a FIFO destination, where it is the unit of order. Optional for a standard
	// queue or topic, where it names the tenant of a fair queue (a standard topic passes it on
	// to its standard-queue subscriptions only): the relay then sends it as it is, with no
	// order, no head of line and no deduplication id. Empty means none.
	GroupID string
	// DeduplicationID is the FIFO MessageDeduplicationId. Empty means one derived from the
	// EventID (the event id itself when SQS accepts it, else its SHA-256), so that a relay that
	// publishes an event twice within five minutes is deduplicated by SQS too.
	DeduplicationID string
	// Delay is the SQS DelaySeconds of the message: whole seconds from 0 to MaxDelay. FIFO
	// queues and topics refuse a per-message delay.
	Delay time.Duration
}

// Attribute is a message attribute. DataType is String, Number or Binary, optionally followed
// by a custom label (String.json).
type Attribute struct {
	DataType    string
	StringValue string
	BinaryValue []byte
}

// StringAttribute returns a String attribute.
func StringAttribute(v string) Attribute { return Attribute{DataType: "String", StringValue: v} }

// NumberAttribute returns a Number attribute.
func NumberAttribute(v string) Attribute { return Attribute{DataType: "Number", StringValue: v} }

// BinaryAttribute returns a Binary attribute.
func BinaryAttribute(v []byte) Attribute { return Attribute{DataType: "Binary", BinaryValue: v} }

// ErrInvalidMessage is wrapped by every error of [Outbox.Add] that refuses a message.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// MessageError is the error of a message that Add refuses. Field names the field at fault.
type MessageError struct {
	Field  string
	Reason string
}

func (e *MessageError) Error() string { return "outbox: Message." + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidMessage.
func (e *MessageError) Unwrap() error { return ErrInvalidMessage }

func invalid(field, format string, args ...any) error {
	return &MessageError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Kind says where a destination is.
type Kind string

const (
	// KindSQS is an SQS queue URL.
	KindSQS Kind = "sqs"
	// KindSNS is an SNS topic ARN.
	KindSNS Kind = "sns"
)

// Destination is a parsed Message.Destination.
type Destination struct {
	Kind Kind
	// Name is the queue's or topic's name.
	Name string
	FIFO bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}(\.fifo)?$`)

// ParseDestination tells an SQS queue URL from an SNS topic ARN.
func ParseDestination(s string) (Destination, error) {
	if s == "" {
		return Destination{}, invalid("Destination", "empty: want an SQS queue URL or an SNS topic ARN")
	}
	if strings.HasPrefix(s, "arn:") {
		p := strings.Split(s, ":")
		if len(p) != 6 || p[1] == "" || p[2] != "sns" || p[3] == "" || p[4] == "" || !nameRE.MatchString(p[5]) {
			return Destination{}, invalid("Destination", "%q is not an SNS topic ARN (arn:PARTITION:sns:REGION:ACCOUNT:NAME)", s)
		}
		return Destination{Kind: KindSNS, Name: p[5], FIFO: strings.HasSuffix(p[5], ".fifo")}, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return Destination{}, invalid("Destination", "%q is neither an SQS queue URL (https://HOST/ACCOUNT/NAME) nor an SNS topic ARN", s)
	}
	p := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(p) != 2 || p[0] == "" || !nameRE.MatchString(p[1]) {
		return Destination{}, invalid("Destination", "%q is not an SQS queue URL: want the path /ACCOUNT/NAME", s)
	}
	return Destination{Kind: KindSQS, Name: p[1], FIFO: strings.HasSuffix(p[1], ".fifo")}, nil
}

// validChars reports whether s holds only the characters SQS accepts in a body or a String
// attribute: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
func validChars(s string) (bool, string) {
	if !utf8.ValidString(s) {
		return false, "is not valid UTF-8"
	}
	for i, r := range s {
		ok := r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || r >= 0x10000
		if !ok {
			return false, fmt.Sprintf("holds the character %U at byte %d, which SQS refuses", r, i)
		}
	}
	return true, ""
}

// ValidateText reports whether SQS and SNS accept s as a message body or a String attribute's
// value: valid UTF-8 holding only the characters validChars lists. The error says which byte is
// refused. The CLI's send checks every line with it before it sends the first.
func ValidateText(s string) error {
	if ok, why := validChars(s); !ok {
		return errors.New(why)
	}
	return nil
}

// ValidateAttributeName reports whether SQS and SNS accept name as a message attribute name: 1
// to 256 characters of A-Z a-z 0-9 _ - ., not starting with AWS. or Amazon. (in any case), not
// starting or ending with a period, and without two periods in a row.
func ValidateAttributeName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > 256:
		return fmt.Errorf("is %d bytes; at most 256", len(name))
	case name[0] == '.' || name[len(name)-1] == '.':
		return errors.New("starts or ends with a period")
	case strings.Contains(name, ".."):
		return errors.New("has two periods in a row")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !attrNameByte(c) {
			return fmt.Errorf("has %q at byte %d; only A-Z a-z 0-9 _ - . are allowed", c, i)
		}
	}
	if l := strings.ToLower(name); strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return errors.New("starts with a prefix AWS reserves (AWS. or Amazon.)")
	}
	return nil
}

var dataTypeRE = regexp.MustCompile(`^(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?$`)

func validateAttribute(name string, a Attribute) error {
	field := "Attributes[" + strconv.Quote(name) + "]"
	if err := ValidateAttributeName(name); err != nil {
		return invalid(field, "the name %v", err)
	}
	if name == EventIDAttribute {
		return invalid(field, "the relay sets %s itself, from Message.EventID", EventIDAttribute)
	}
	m := dataTypeRE.FindStringSubmatch(a.DataType)
	if m == nil || len(a.DataType) > 256 {
		return invalid(field, "DataType %q: want String, Number or Binary, optionally with a .label", a.DataType)
	}
	switch m[1] {
	case "Binary":
		if len(a.BinaryValue) == 0 || a.StringValue != "" {
			return invalid(field, "a Binary attribute needs a non-empty BinaryValue and no StringValue")
		}
	case "Number":
		if err := validNumber(a.StringValue); err != nil || a.BinaryValue != nil {
			return invalid(field, "a Number attribute needs a StringValue that SQS takes as a number: %v", err)
		}
	default:
		if a.StringValue == "" || a.BinaryValue != nil {
			return invalid(field, "a String attribute needs a non-empty StringValue and no BinaryValue")
		}
		if ok, why := validChars(a.StringValue); !ok {
			return invalid(field, "StringValue %s", why)
		}
	}
	return nil
}

// ValidateNumber reports whether SQS and SNS take s as the value of a Number attribute: a
// decimal of up to 38 significant digits between -10^128 and 10^126.
func ValidateNumber(s string) error { return validNumber(s) }

var numberRE = regexp.MustCompile(`^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$`)

// validNumber checks what SQS checks: a decimal of up to 38 significant digits between -10^128
// and 10^126.
func validNumber(s string) error {
	if !numberRE.MatchString(s) {
		return fmt.Errorf("%q is not a decimal number", s)
	}
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	digits := strings.TrimLeft(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, mant), "0")
	if strings.Contains(mant, ".") {
		digits = strings.TrimRight(digits, "0")
	}
	if len(digits) > 38 {
		return fmt.Errorf("%q has more than 38 significant digits", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.Abs(f) > 1e126 || (f != 0 && math.Abs(f) < 1e-128) {
		return fmt.Errorf("%q is outside -10^128 to 10^126", s)
	}
	return nil
}

var fifoIDRE = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]{1,128}$")

// validateEventID applies the inbox's key rules, and the attribute's character set.
func validateEventID(id string) error {
	if len(id) > MaxEventIDLen {
		return invalid("EventID", "is %d bytes; at most %d", len(id), MaxEventIDLen)
	}
	if ok, why := validChars(id); !ok {
		return invalid("EventID", "%s", why)
	}
	return nil
}

// newEventID returns a random (version 4) UUID.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// dedupID is the FIFO deduplication id derived from an event id.
func dedupID(eventID string) string {
	if fifoIDRE.MatchString(eventID) {
		return eventID
	}
	sum := sha256.Sum256([]byte(eventID))
	return hex.EncodeToString(sum[:])
}

// size is what SQS counts against the message size limit: the body, and each attribute's name,
// data type and value.
func (m *Message) size() int {
	n := len(m.Body) + len(EventIDAttribute) + len("String") + len(m.EventID)
	for k, a := range m.Attributes {
		n += len(k) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return n
}

// validate checks m against maxSize and fills in its event id and FIFO deduplication id.
// sizeLimit is the size limit of a message's destination; set says Config.MaxMessageSizes gave
// it for that destination (a topic's may then pass MaxSNSMessageSize).
type sizeLimit struct {
	n       int
	set     bool
	offload int // Config.MaxOffloadSize: the largest body accepted over n, to be offloaded
}

// pointerReserve is the room a message offloaded by the relay keeps under its limit for the
// pointer that replaces its body and the size attribute: a pointer names a bucket (at most 63
// bytes) and a key (the writer's prefix, up to 256 bytes, an event id or its hash, up to 200,
// and a SHA-256, 64), in JSON.
const pointerReserve = 1024

func (m *Message) validate(maxSize sizeLimit) (Destination, error) {
	d, err := ParseDestination(m.Destination)
	if err != nil {
		return d, err
	}
	if m.EventID == "" {
		m.EventID = newEventID()
	} else if err := validateEventID(m.EventID); err != nil {
		return d, err
	}
	if m.Body == "" {
		return d, invalid("Body", "is empty; SQS and SNS need at least one character")
	}
	if ok, why := validChars(m.Body); !ok {
		return d, invalid("Body", "%s", why)
	}
	if len(m.Attributes) > MaxAttributes-1 {
		return d, invalid("Attributes", "has %d attributes; at most %d, since the relay adds %s (SQS and SNS take %d)",
			len(m.Attributes), MaxAttributes-1, EventIDAttribute, MaxAttributes)
	}
	for k, a := range m.Attributes {
		if err := validateAttribute(k, a); err != nil {
			return d, err
		}
	}
	limit := maxSize.n
	if d.Kind == KindSNS && !maxSize.set {
		limit = min(limit, MaxSNSMessageSize)
	}
	if n := m.size(); n > limit {
		switch {
		case maxSize.offload == 0:
			return d, invalid("Body", "the message is %d bytes with its attributes (the event_id included); the limit for this destination is %d", n, limit)
		case len(m.Body) > maxSize.offload:
			return d, invalid("Body", "is %d bytes; the largest body offloaded to S3 is %d (Config.MaxOffloadSize)", len(m.Body), maxSize.offload)
		case len(m.Attributes) > MaxAttributes-2:
			return d, invalid("Attributes", "has %d attributes; a message offloaded to S3 takes at most %d, since the relay adds %s and the size attribute (SQS and SNS take %d)",
				len(m.Attributes), MaxAttributes-2, EventIDAttribute, MaxAttributes)
		case n-len(m.Body)+pointerReserve > limit:
			return d, invalid("Attributes", "with the attributes (the event_id included), the message offloaded to S3 would be %d bytes (a pointer reserved %d); the limit for this destination is %d",
				n-len(m.Body)+pointerReserve, pointerReserve, limit)
		}
	}
	if m.GroupID != "" && !fifoIDRE.MatchString(m.GroupID) {
		return d, invalid("GroupID", "%q: want 1 to 128 characters of A-Z a-z 0-9 and ASCII punctuation", m.GroupID)
	}
	if m.DeduplicationID != "" && !fifoIDRE.MatchString(m.DeduplicationID) {
		return d, invalid("DeduplicationID", "%q: want 1 to 128 characters of A-Z a-z 0-9 and ASCII punctuation", m.DeduplicationID)
	}
	switch {
	case m.Delay < 0 || m.Delay > MaxDelay || m.Delay%time.Second != 0:
		return d, invalid("Delay", "is %v; want whole seconds from 0 to %v", m.Delay, MaxDelay)
	case d.FIFO && m.GroupID == "":
		return d, invalid("GroupID", "is empty, and %s is FIFO: a FIFO destination needs a message group", d.Name)
	case d.FIFO && m.Delay != 0:
		return d, invalid("Delay", "is %v, and %s is FIFO: FIFO queues and topics refuse a per-message delay", m.Delay, d.Name)
	case d.Kind == KindSNS && m.Delay != 0:
		return d, invalid("Delay", "is %v, and %s is an SNS topic: SNS has no per-message delay", m.Delay, d.Name)
	case !d.FIFO && m.DeduplicationID != "":
		return d, invalid("DeduplicationID", "is set, and %s is not FIFO: only FIFO destinations take it", d.Name)
	}
	if d.FIFO && m.DeduplicationID == "" {
		m.DeduplicationID = dedupID(m.EventID)
	}
	return d, nil
}

func attrNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

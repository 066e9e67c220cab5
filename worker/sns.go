package worker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SNSMode says whether the worker unwraps SNS notification envelopes.
//
// When an SNS topic delivers to an SQS queue without raw message delivery, SNS wraps each message
// in a JSON envelope: the published body is the envelope's "Message" string, and the published
// message attributes are the envelope's "MessageAttributes". SNS puts no SQS message attributes
// on such a delivery (as the AWS documentation says, and as GoAws and fauxqs do). Unwrapped, the
// handler (and the inbox's key, the "event_id" attribute or the body's "id") sees the message as
// it was published, whichever way the subscription delivers.
//
// A message that carries SQS message attributes of its own is therefore not an enveloped SNS
// delivery, whatever its body looks like, and an envelope's attributes never replace the SQS
// message's, in any mode. Otherwise a producer that relays user-supplied content as a body, and
// sets its own "event_id" attribute (the outbox and `sqsinbox send` do), could be made to send a
// body shaped like an envelope that names another event's id: that event's real message would
// then be deleted as a duplicate and never applied.
//
// What stays exposed: a message without SQS attributes is keyed by its body. If its body is
// itself an envelope, [SNSAuto] unwraps it, and the key is the inner "Message"'s "id" or the
// envelope's own "event_id", both chosen by whoever wrote the body. A producer that keys events
// by the body's "id" and sends user-supplied bodies without an "event_id" attribute is open to
// that. Set the "event_id" attribute on every send; use [SNSRaw] on a queue with no SNS
// subscription (or only raw-delivery ones), and [SNSEnvelope] on a queue fed only by SNS.
type SNSMode int

const (
	// SNSAuto unwraps a body that is an SNS envelope (a JSON object whose "Type" and "TopicArn"
	// are strings) on a message without SQS message attributes, and leaves any other message as
	// it is: a body shaped like an envelope on a message with SQS attributes is a raw body, and
	// those attributes decide its key. A message without SQS attributes whose body has "Type"
	// and "TopicArn" but is not a well-formed notification fails (retry, then the DLQ). It is
	// the default.
	SNSAuto SNSMode = iota
	// SNSRaw never unwraps: the subscriptions use raw message delivery, or the queue gets no SNS
	// traffic. A raw JSON body that happens to hold "Type" and "TopicArn" is then not misread.
	SNSRaw
	// SNSEnvelope requires every message to be an SNS notification envelope as SNS delivers it,
	// with no SQS message attributes; any other message fails (retry, then the DLQ). A message
	// with SQS attributes is refused even when its body is an envelope: SNS never sends one, so
	// it was sent to the queue another way (or through a raw-delivery subscription), and neither
	// its attributes nor the envelope's can be trusted to be the published ones. Refused, it
	// reaches the DLQ, where an operator sees it, rather than being processed under a key that
	// mixes two sources.
	SNSEnvelope
)

func (m SNSMode) String() string {
	switch m {
	case SNSAuto:
		return "auto"
	case SNSRaw:
		return "raw"
	case SNSEnvelope:
		return "envelope"
	}
	return fmt.Sprintf("SNSMode(%d)", int(m))
}

// SNSNotification is the SNS metadata of a message that arrived in an SNS envelope.
type SNSNotification struct {
	// TopicARN is the topic the message was published to.
	TopicARN string
	// MessageID is SNS's id of the publish. A producer that retries its Publish gets a new one,
	// so it is not the default inbox key (inboxhandler.KeyFromSNSMessageID chooses it).
	MessageID string
	// Subject is the publish's subject, if any.
	Subject string
	// Timestamp is when SNS accepted the publish.
	Timestamp time.Time
	// SequenceNumber is set for messages of a FIFO topic.
	SequenceNumber string
}

// ErrSNSEnvelope is wrapped by the error of a message whose body is not the SNS notification it
// claims (or, with [SNSEnvelope], is no envelope at all). Such a message goes the retry-then-DLQ
// way; its handler is not called.
var ErrSNSEnvelope = errors.New("worker: malformed SNS envelope")

// ErrSNSNotNotification is wrapped by the error of an SNS envelope of another type than
// Notification, such as a SubscriptionConfirmation: it is never processed as an event, and goes
// the retry-then-DLQ way, where an operator sees it. (A queue subscribed to a topic is confirmed
// by SNS itself; a confirmation in the queue means a subscription was made another way.)
var ErrSNSNotNotification = errors.New("worker: SNS envelope is not a Notification")

// snsEnvelope is the JSON of an SNS notification delivered to SQS without raw message delivery.
// The signature fields are not read: docs/sns-fanout.md ("No signature check") says why the
// worker does not verify them.
type snsEnvelope struct {
	Type              *string                     `json:"Type"`
	MessageID         string                      `json:"MessageId"`
	TopicARN          *string                     `json:"TopicArn"`
	Subject           string                      `json:"Subject"`
	Message           json.RawMessage             `json:"Message"`
	Timestamp         string                      `json:"Timestamp"`
	SequenceNumber    string                      `json:"SequenceNumber"`
	MessageAttributes map[string]snsAttributeJSON `json:"MessageAttributes"`
}

type snsAttributeJSON struct {
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

var topicArnField = []byte(`"TopicArn"`)

// UnwrapSNS applies mode to m as the worker does before a handler sees it (Config.SNS): when m
// has no SQS message attributes and its body is an SNS notification envelope, it replaces m's
// body and attributes with the published ones and fills m.SNS. A message with SQS message
// attributes is never unwrapped: [SNSAuto] leaves it as it is and [SNSEnvelope] refuses it (see
// [SNSMode] for why). It returns an error wrapping [ErrSNSEnvelope] or [ErrSNSNotNotification]
// for a message it must refuse, and then leaves m as it was. Tools that read a queue the worker
// serves (an audit, a redrive) use it to see messages as the handler does.
func UnwrapSNS(m *Message, mode SNSMode) error {
	if mode == SNSRaw {
		return nil
	}
	if len(m.Attributes) > 0 {
		// SNS sets no SQS attributes on an enveloped delivery: this message came another way.
		if mode == SNSEnvelope {
			return fmt.Errorf("%w: the message has SQS message attributes (%s), which SNS never sets on an enveloped delivery (Config.SNS is SNSEnvelope)",
				ErrSNSEnvelope, strings.Join(slices.Sorted(maps.Keys(m.Attributes)), ", "))
		}
		return nil
	}
	b := bytes.TrimSpace(m.Body)
	if len(b) == 0 || b[0] != '{' {
		if mode == SNSEnvelope {
			return fmt.Errorf("%w: the body is not a JSON object (Config.SNS is SNSEnvelope)", ErrSNSEnvelope)
		}
		return nil
	}
	if mode == SNSAuto && !bytes.Contains(b, topicArnField) {
		return nil // no envelope has no TopicArn: skip the decode (most raw bodies)
	}
	var env snsEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		if mode == SNSEnvelope {
			return fmt.Errorf("%w: %w", ErrSNSEnvelope, err)
		}
		return nil // not JSON we can read as an envelope: a raw body
	}
	if mode == SNSAuto && (env.Type == nil || env.TopicARN == nil) {
		return nil
	}
	switch {
	case env.Type == nil || env.TopicARN == nil:
		return fmt.Errorf("%w: no \"Type\" or \"TopicArn\" (Config.SNS is SNSEnvelope)", ErrSNSEnvelope)
	case *env.Type != "Notification":
		return fmt.Errorf("%w: Type %q from topic %s (never processed as an event)", ErrSNSNotNotification, *env.Type, *env.TopicARN)
	case !strings.HasPrefix(*env.TopicARN, "arn:"):
		return fmt.Errorf("%w: TopicArn %q is not an ARN", ErrSNSEnvelope, *env.TopicARN)
	case env.MessageID == "":
		return fmt.Errorf("%w: no \"MessageId\"", ErrSNSEnvelope)
	}
	var body string
	if len(env.Message) == 0 || env.Message[0] != '"' || json.Unmarshal(env.Message, &body) != nil {
		return fmt.Errorf("%w: \"Message\" is not a string", ErrSNSEnvelope)
	}
	n := &SNSNotification{TopicARN: *env.TopicARN, MessageID: env.MessageID, Subject: env.Subject,
		SequenceNumber: env.SequenceNumber}
	if env.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, env.Timestamp)
		if err != nil {
			return fmt.Errorf("%w: Timestamp %q: %w", ErrSNSEnvelope, env.Timestamp, err)
		}
		n.Timestamp = t
	}
	attrs, err := snsAttributes(env.MessageAttributes)
	if err != nil {
		return err
	}
	m.Body, m.Attributes, m.SNS = []byte(body), attrs, n
	return nil
}

// snsAttributes turns an envelope's MessageAttributes into SQS message attributes: String and
// Number (and String.Array, a JSON array as text) keep their text; Binary is base64 in the
// envelope and is decoded.
func snsAttributes(in map[string]snsAttributeJSON) (map[string]types.MessageAttributeValue, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]types.MessageAttributeValue, len(in))
	for name, a := range in {
		base, _, _ := strings.Cut(a.Type, ".")
		switch base {
		case "String", "Number":
			out[name] = types.MessageAttributeValue{DataType: aws.String(a.Type), StringValue: aws.String(a.Value)}
		case "Binary":
			v, err := base64.StdEncoding.DecodeString(a.Value)
			if err != nil {
				return nil, fmt.Errorf("%w: Binary attribute %q is not base64: %w", ErrSNSEnvelope, name, err)
			}
			out[name] = types.MessageAttributeValue{DataType: aws.String(a.Type), BinaryValue: v}
		default:
			return nil, fmt.Errorf("%w: attribute %q has type %q (want String, Number or Binary)", ErrSNSEnvelope, name, a.Type)
		}
	}
	return out, nil
}

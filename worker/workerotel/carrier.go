package workerotel

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// AttributeCarrier adapts SQS message attributes (worker.Message.Attributes, or the
// MessageAttributes of a SendMessage input) to a propagation.TextMapCarrier. Get reads String
// and Number attributes; Set writes String attributes. A producer injects its span's context
// with
//
//	attrs := map[string]types.MessageAttributeValue{}
//	otel.GetTextMapPropagator().Inject(ctx, workerotel.AttributeCarrier(attrs))
//
// SQS allows 10 message attributes: W3C trace context takes one or two (traceparent, and
// tracestate when it is not empty), baggage one more.
type AttributeCarrier map[string]types.MessageAttributeValue

// Get returns the value of the attribute key, or "".
func (c AttributeCarrier) Get(key string) string {
	v, ok := c[key]
	if !ok || v.StringValue == nil {
		return ""
	}
	return *v.StringValue
}

// Set sets the String attribute key to value.
func (c AttributeCarrier) Set(key, value string) {
	c[key] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
}

// Keys returns the names of the attributes.
func (c AttributeCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// OutboxPropagate returns a function for outbox.Config.Propagate: the text headers of the span
// context (and baggage) in ctx, as p writes them (nil means the global propagator), so that
// events added inside a span carry traceparent to their consumers.
func OutboxPropagate(p propagation.TextMapPropagator) func(ctx context.Context) map[string]string {
	return func(ctx context.Context) map[string]string {
		prop := p
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		c := propagation.MapCarrier{}
		prop.Inject(ctx, c)
		return c
	}
}

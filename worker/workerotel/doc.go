// Package workerotel reports a [worker.Worker]'s messages to OpenTelemetry: a span per message
// that continues the producer's trace, the worker's metrics through a meter, the inbox's claims
// and commits as child spans, and trace ids in log records. It is a package of its own so that
// programs that do not use OpenTelemetry do not link it.
//
// # Spans
//
// [Middleware] wraps a [worker.Handler]. Each message gets a span of kind consumer named
// "process <queue>", following the OpenTelemetry messaging conventions: messaging.system
// aws_sqs, messaging.operation.name and .type process, messaging.destination.name,
// messaging.message.id, and sqsinbox.message.receive_count (ApproximateReceiveCount). When the
// handler returns, the span gets sqsinbox.message.outcome, from what the handler returned:
//
//   - processed: nil
//   - duplicate: [worker.ErrDuplicate] (the inbox found the event's row)
//   - blocked: [worker.RetryBlocked] (another consumer holds the event's claim)
//   - retry: [worker.RetryAfter]
//   - discarded: [worker.Discard]
//   - failed: [worker.Unavailable], a panic, a timeout, any other error; the span's status is
//     Error and error.type says which (unavailable, panic, timeout, lease_lost, stopping,
//     canceled, or _OTHER).
//
// # The producer's trace
//
// The span's parent is the producer's span, read from the message attributes traceparent and
// tracestate (W3C trace context; baggage too) with Config.Propagator. The worker has already
// unwrapped an SNS envelope, so a message published to a topic carries the publisher's
// context the same way. When there is no traceparent, the parent is read from the AWSTraceHeader
// system attribute that SQS sets for X-Ray (Root=1-5759e988-bd862e3fe1be46a994272793;
// Parent=53995c3f42cd8ad8;Sampled=1); when both are present and differ, the X-Ray context is
// a link. [AttributeCarrier] writes the context into the attributes of a message to send.
//
// # The inbox
//
// [InboxHooks] goes into inbox.Config.Hooks: each claim and commit becomes a child span of the
// message's span ("inbox claim", "inbox commit") with its outcome (fresh, duplicate, blocked,
// failed; committed, unknown, failed), the handler and the event key, and the message's span gets
// the handler, key and claim outcome too. So a duplicate's trace says which handler's row for
// which key made it one.
//
// # Metrics and logs
//
// [NewMetrics] implements [worker.Metrics] with a meter: messaging.client.consumed.messages and
// messaging.process.duration where the conventions have a name, sqsinbox.worker.* for the rest.
// [LogHandler] wraps a [log/slog.Handler] so that records logged with a context that holds a span
// carry trace_id and span_id.
package workerotel

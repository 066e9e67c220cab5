// Package s3payload carries payloads too large for an SQS message through Amazon S3, in the
// format of AWS's SQS and SNS extended client libraries, so that sqsinbox and those libraries
// read each other's messages.
//
// An offloaded message's body is a pointer to an S3 object,
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"B","s3Key":"K"}]
//
// (older writers name the class com.amazon.sqs.javamessaging.MessageS3Pointer), and it carries
// the Number message attribute [SizeAttribute] (older writers: [LegacySizeAttribute]) with the
// payload's size in bytes. Only that attribute marks a pointer: an ordinary body that happens to
// look like one is never fetched. Under SNS without raw message delivery, the attribute is among
// the envelope's message attributes, which the worker unwraps first.
//
// A [Reader] is the worker's payload fetcher (set it as worker.Config.Payloads): given each
// offloaded message's [Ref], it fetches the payload before the handler runs, outside the
// handler's transaction, from the buckets it is allowed to read only, within a bound on each
// payload's size and on the bytes held at once. The package knows nothing of the worker: the
// worker hands it the pointer bodies and puts the payloads back into its messages. The handler sees the payload as if
// it had come inline, so the inbox's key is the one the payload gives (the event_id attribute,
// else the payload's "id", else its SHA-256). A refused bucket, a missing object, a malformed
// pointer or an oversized payload is an error that names the bucket and key, and the message goes
// the retry-then-DLQ way. The Reader never deletes an object: under SNS fan-out other
// subscribers may not have read it yet. An S3 lifecycle rule expires the objects (the
// payload-bucket Terraform module), after the queue's redelivery horizon and a margin.
//
// A [Writer] offloads on the sending side (the outbox relay, sqsinbox send): a body over its
// threshold (or every body, if configured) is put to S3 under a key derived from the event id and
// the payload's SHA-256, so that a relay that publishes an event again after a crash writes the
// same object again rather than a second one.
package s3payload

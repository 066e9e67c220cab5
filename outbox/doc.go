// Package outbox is the producer's half of exactly-once in effect: a transactional outbox in the
// application's own PostgreSQL database, published to SQS queues and SNS topics by a relay.
//
// A service that writes an order and then calls SendMessage either loses the event (a crash
// after the commit, before the send) or sends an event for a write that rolled back. With the
// outbox, [Outbox.Add] inserts the event in the same transaction as the business write, so both
// commit or neither does, and the relay publishes committed events afterwards, each with its
// event id in the event_id message attribute. The relay's one gap, "published, then crashed
// before marking it sent", publishes the event again with the same event id, which is what the
// consuming inbox absorbs.
//
// # Adding events
//
// [Outbox.Add] (or [Add], for the default Config) refuses, with a *[MessageError] that names
// the field, every message SQS or SNS would refuse: no destination, a body over the size limit,
// more attributes than fit beside event_id, an attribute name SQS refuses, a FIFO destination
// without a group id, a delay on a FIFO queue or a topic. The relay never meets a message it
// could have been told about at Add.
//
// # Schema and migrations
//
// The table outbox_messages lives in a schema ([DefaultSchema] unless Config.Schema says
// otherwise), and is created only by [Migrate], which records its versions in
// outbox_schema_migrations, apart from the inbox's.
package outbox

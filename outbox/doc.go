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
// # The relay
//
// A [Relay] (built by [NewRelay], run by [Relay.Start] and [Relay.Stop]) claims committed
// rows, publishes them with SendMessageBatch or PublishBatch (ten entries, within the batch
// payload limit, each with the event_id attribute), and marks each sent. Only the entries that
// failed are tried again, after a backoff that doubles from RelayConfig.BackoffMin to
// BackoffMax; a row that has failed RelayConfig.MaxAttempts times is parked (parked_at, with its
// last error in last_error), never dropped, until [Outbox.RetryParked] re-queues it.
// [Outbox.Stats] reports the backlog, its oldest age and the parked rows.
//
// The relay is a pipeline: one goroutine claims rows (RelayConfig.ClaimSize at once) and queues
// them as batches for the senders, goroutines that publish; it claims again while fewer than
// twice as many batches as senders wait (or sooner, once a claim's worth of marks waits for one),
// and it writes the marks of the batches published since (sent, failed, released) in the same
// round trip as that claim, marks first, in one transaction. Marks go alone only when no claim is
// coming: at the end of a backlog they wait up to 20 ms for the last batches' reports, so that a
// backlog costs about one round trip per claim. The round's commit does not wait for the disk: a crash of PostgreSQL that undid
// it would only publish rows again, with their event ids. The relay sizes its senders to the
// publish call's round trip (RelayConfig.Senders 0, from DefaultSenders up to MaxSenders), so
// that SQS 20 ms away, as in AWS, costs it little of its rate. After a full claim of a standard
// destination's rows, the next claim starts past them instead of reading them again (they are
// still at the front of the unsent rows while they are published); every fourth claim, and every
// claim that follows one that came up short, starts from the front again, so that a row
// committed late, released or past its backoff waits a few claims at most. A FIFO destination's
// rows are claimed a group's head at a time, found through the group index one entry per group
// (never by reading the rows queued behind a head), starting past the group the last FIFO claim
// reached and wrapping around, so that every group gets its turn. The table keeps half
// of each page free (fillfactor 50), so that the claim, which sets only the lease, rewrites a row
// in place without new index entries. [Relay.Stop] lets the publishes in flight finish
// and releases the claimed rows no sender had begun; [Relay.StopAndCancel] cancels the
// publishes too, and releases their rows.
//
// The relay wakes on commit: a statement trigger NOTIFYs, and PostgreSQL delivers a
// notification only when the transaction commits. It listens on a connection of its own, not
// one of the pool's. Polling every RelayConfig.PollInterval is the fallback: it catches a
// notification sent while no relay listened, and rows whose backoff has ended. At start (and
// after each reconnect) the relay sends a probe notification through the pool and waits up to
// 10 s for its connection to hear it. Behind a transaction pooler (PgBouncer in transaction
// mode) it never does: the LISTEN stayed on a server connection the pooler gave to other
// clients. The relay then says so once in its log and polls every [DeafPollInterval] (250 ms)
// instead, so a row committed while it is idle waits at most that long to be claimed; it polls
// as often until the probe is heard, and while its connection is down.
//
// # Why a lease, not row locks held across the publish
//
// A relay could claim with SELECT ... FOR UPDATE SKIP LOCKED and keep that transaction open
// while it calls SQS. It does not: it claims rows by stamping a lease (claimed_until, and a token
// of its own) in a short transaction, publishes with no transaction open, and then marks the
// rows in another short statement that checks its token. A transaction held across a network
// call that the SDK may retry for tens of seconds would sit idle in transaction, where the
// idle_in_transaction_session_timeout that sqsinbox sets for the inbox's transactions (and that
// operators set server-wide) would end it, and it would hold a pooled connection and row locks
// (and hold back vacuum) for as long as SQS is slow. A lease costs one more short statement per
// claim. RelayConfig.Lease is at least twice RelayConfig.PublishTimeout and a claimed batch not
// begun within half of it is released untried, so a live relay marks its rows before another
// may take them. A
// relay that dies holding a lease delays its rows by at most the lease; one that published and
// died before marking leaves rows that are published again, with the same event id, for the
// consuming inbox to absorb (and, on FIFO destinations, with the same deduplication id).
//
// # Several relays, and FIFO order
//
// Claims take rows FOR UPDATE SKIP LOCKED inside the claiming statement, and the conditions on
// the row (unsent, not parked, not leased) are checked again on the row version a concurrent
// claim committed, so two relays never hold the same row at once. For a FIFO queue or topic only
// a group's head may be claimed: a row whose group has an earlier unsent row (in flight, backing
// off, or parked) waits. So one message per group is in flight at a time, and a failed entry
// never lets a later one of its group pass it: a parked head stops its group until it is
// re-queued. Groups go in parallel. The mark of a group's head rides with the claim of its next
// row, so one group moves one row per publish and one PostgreSQL round trip (about 200 rows/s on
// a small machine): spread ordered events over many groups where the order allows it.
package outbox
